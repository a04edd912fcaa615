"""Scoped, timed pauses in the database (domain/pauses.py): created and ended with their audit events.

A pause must hold on every replica and after a restart, and must stop holding at its end without anyone acting,
so it is a row with an optional end, and "active" is a comparison with the store's clock. Resuming one sets
`ended_at` and `ended_by` and keeps the row.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import or_, select

from remediator.domain.json_values import JsonObject
from remediator.domain.pauses import ActivePause
from remediator.domain.timestamps import as_utc
from remediator.store.models import Pause
from remediator.store.transactions import RepositoryBase

__all__ = ["PauseStore", "pause_record"]


def pause_record(pause: Pause, now: datetime | None = None) -> JsonObject:
    """A pause as the API, the audit log and `remediator get pauses` show it."""
    ends = as_utc(pause.ends_at) if pause.ends_at else None
    ended = as_utc(pause.ended_at) if pause.ended_at else None
    active = ended is None and (ends is None or now is None or ends > now)
    everything = not pause.nodes and not pause.selector and not pause.playbooks
    return {
        "id": pause.id, "created_at": as_utc(pause.created_at).isoformat(),
        "created_by": pause.created_by, "reason": pause.reason,
        "scope": {"all": everything, "nodes": [*pause.nodes], "selector": pause.selector,
                  "playbooks": [*pause.playbooks]},
        "until": ends.isoformat() if ends else None, "active": active,
        "ended_at": ended.isoformat() if ended else None, "ended_by": pause.ended_by,
    }


def _active(pause: Pause) -> ActivePause:
    return ActivePause(pause.id, pause.created_by, pause.reason, tuple(pause.nodes), pause.selector,
                       tuple(pause.playbooks), as_utc(pause.ends_at) if pause.ends_at else None)


class PauseStore(RepositoryBase):
    """Pauses (a mixin of `Repository`)."""

    async def create_pause(
        self, *, created_by: str, reason: str, nodes: Sequence[str], selector: str | None, playbooks: Sequence[str],
        ends_at: datetime | None,
    ) -> JsonObject:
        """Store a new pause (validated by the caller); audited as `pause.created` with the author."""
        now = self.clock()
        pause = Pause(id=str(uuid.uuid4()), created_at=now, created_by=created_by, reason=reason, nodes=list(nodes),
                      selector=selector, playbooks=list(playbooks), ends_at=ends_at, ended_at=None, ended_by=None)
        async with self.transaction() as session:
            session.add(pause)
            record = pause_record(pause, now)
            await self.audit(session, "pause.created", actor=created_by, data=record)
        return record

    async def end_pause(self, pause_id: str, *, actor: str, reason: str | None) -> JsonObject | None:
        """Resume one pause now; audited as `pause.ended`. None: no such pause. One already over is returned
        unchanged and nothing is audited."""
        now = self.clock()
        async with self.transaction() as session:
            pause = await session.get(Pause, pause_id, with_for_update=True)
            if pause is None:
                return None
            ends = pause.ends_at
            if pause.ended_at is None and (ends is None or ends > now):
                pause.ended_at, pause.ended_by = now, actor
                await self.audit(session, "pause.ended", actor=actor,
                                 data={**pause_record(pause, now), "resume_reason": reason})
            return pause_record(pause, now)

    async def end_everything_pauses(self, *, actor: str, reason: str | None) -> list[str]:
        """Resume every active pause whose scope is everything (what a plain `resume` ends besides the kill
        switch); the ids ended."""
        ended: list[str] = []
        for pause in await self.active_pauses():
            if pause.everything and await self.end_pause(pause.id, actor=actor, reason=reason):
                ended.append(pause.id)
        return ended

    async def active_pauses(self) -> list[ActivePause]:
        """The pauses holding now, oldest first."""
        now = self.clock()
        async with self.reading() as session:
            rows = await session.scalars(
                select(Pause).where(Pause.ended_at.is_(None), or_(Pause.ends_at.is_(None), Pause.ends_at > now))
                .order_by(Pause.created_at)
            )
            return [_active(p) for p in rows.all()]

    async def list_pauses(self, *, include_ended: bool = False, limit: int = 200) -> list[JsonObject]:
        """Pauses newest first: the active ones, or every one (with `include_ended`)."""
        now = self.clock()
        async with self.reading() as session:
            query = select(Pause).order_by(Pause.created_at.desc()).limit(limit)
            if not include_ended:
                query = query.where(Pause.ended_at.is_(None), or_(Pause.ends_at.is_(None), Pause.ends_at > now))
            return [pause_record(p, now) for p in (await session.scalars(query)).all()]

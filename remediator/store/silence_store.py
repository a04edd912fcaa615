"""Silences in the database: created and expired with their audit events, read by the API and the worker.

A silence must hold on every replica and after a restart, and must stop holding at its end without anyone
acting, so it is a row with a start and an end, and "active" is a comparison with the store's clock. Expiring
one early sets its end to now and keeps the row: the alerts it held keep naming it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from remediator.domain.json_values import JsonObject
from remediator.domain.silences import ActiveSilence, SilenceMatcher
from remediator.domain.timestamps import as_utc
from remediator.store.models import Silence
from remediator.store.transactions import RepositoryBase

__all__ = ["SilenceStore", "active_silences_in"]


def _record(silence: Silence) -> JsonObject:
    return {
        "silence_id": silence.id, "matchers": [*silence.matchers],
        "startsAt": _iso(silence.starts_at), "endsAt": _iso(silence.ends_at),
        "createdBy": silence.created_by, "comment": silence.comment,
    }


def _iso(value: datetime) -> str:
    return as_utc(value).isoformat()


async def active_silences_in(session: AsyncSession, now: datetime) -> list[ActiveSilence]:
    """The silences in force at `now`, oldest first, read in `session` (one indexed read: those whose end is
    still ahead). The worker's decisions and the intake's re-delivery after a silence (store/redelivery.py)
    read them the same way."""
    rows = await session.scalars(
        select(Silence).where(Silence.ends_at > now, Silence.starts_at <= now).order_by(Silence.created_at)
    )
    return [
        ActiveSilence(s.id, tuple(SilenceMatcher.of(m) for m in s.matchers), s.created_by, s.comment, s.ends_at)
        for s in rows.all()
    ]


class SilenceStore(RepositoryBase):
    """Silences (a mixin of `Repository`)."""

    async def create_silence(
        self, matchers: Sequence[SilenceMatcher], *, starts_at: datetime, ends_at: datetime, created_by: str,
        comment: str, actor: str,
    ) -> Silence:
        """Store a new silence (validated by the caller); audited as `silence.created` with the actor."""
        now = self.clock()
        silence = Silence(
            id=str(uuid.uuid4()), matchers=[m.as_dict() for m in matchers], starts_at=starts_at, ends_at=ends_at,
            created_by=created_by, comment=comment, actor=actor, created_at=now, updated_at=now, expired_by=None,
        )
        async with self.transaction() as session:
            session.add(silence)
            await self.audit(session, "silence.created", actor=actor, data=_record(silence))
        return silence

    async def expire_silence(self, silence_id: str, *, actor: str, comment: str | None = None) -> Silence | None:
        """End a silence now (kept, with who ended it); audited as `silence.expired`. None: no such silence.
        An already expired silence is returned unchanged, and nothing is audited."""
        async with self.transaction() as session:
            silence = await session.get(Silence, silence_id, with_for_update=True)
            if silence is None:
                return None
            now = self.clock()
            if silence.ends_at <= now:
                return silence
            if silence.starts_at > now:
                silence.starts_at = now  # a pending silence ends before it begins: both are now
            silence.ends_at = now
            silence.updated_at = now
            silence.expired_by = actor
            data = _record(silence)
            if comment:
                data["expire_comment"] = comment
            await self.audit(session, "silence.expired", actor=actor, data=data)
        return silence

    async def get_silence(self, silence_id: str) -> Silence | None:
        async with self.reading() as session:
            return await session.get(Silence, silence_id)

    async def silences_by_id(self, ids: Sequence[str]) -> dict[str, Silence]:
        wanted = sorted({i for i in ids if i})
        if not wanted:
            return {}
        async with self.reading() as session:
            rows = await session.scalars(select(Silence).where(Silence.id.in_(wanted)))
            return {s.id: s for s in rows.all()}

    async def list_silences(self, *, limit: int = 1000) -> list[Silence]:
        """Newest first."""
        async with self.reading() as session:
            rows = await session.scalars(select(Silence).order_by(Silence.created_at.desc()).limit(limit))
            return list(rows.all())

    async def active_silences(self, now: datetime) -> list[ActiveSilence]:
        """The silences in force at `now`, oldest first (`active_silences_in`)."""
        async with self.reading() as session:
            return await active_silences_in(session, now)

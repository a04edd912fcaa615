"""Alert intake: durable batches from the webhook, then claims of new alerts by the worker."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from remediator.intake.models import AlertmanagerPayload
from remediator.store.intake_repeats import as_repeats
from remediator.store.models import (
    AlertRow,
)
from remediator.store.unit_of_work import (
    _ALERTS,
    _BATCHES,
    RepositoryBase,
    StoredBatch,
    _intake_rows,
    _with_repeats,
)

__all__ = ["IntakeStore"]

_CLAIM_CHUNK = 500  # ids per claiming UPDATE (well under SQLite's bound-parameter limit)


class IntakeStore(RepositoryBase):
    """Alert intake (a mixin of `Repository`)."""

    async def store_batch(self, payload: AlertmanagerPayload) -> StoredBatch:
        """Commit the batch and each alert in one transaction. Repeats are stored but never processed."""
        return (await self.store_batches([payload]))[0]

    async def store_batches(self, payloads: Sequence[AlertmanagerPayload]) -> list[StoredBatch]:
        """Commit several webhook batches in ONE transaction (group commit); all or none are stored.

        An alert is a repeat when its (fingerprint, startsAt, status) was stored before or earlier in this
        call; repeats are stored with state `repeat` and never processed.
        """
        now = self._clock()
        keyed = [[f"{a.fingerprint}|{a.starts_at.isoformat()}|{a.status}" for a in p.alerts] for p in payloads]
        all_keys = sorted({k for keys in keyed for k in keys})

        def build(existing: dict[str, int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[StoredBatch]]:
            return _intake_rows(payloads, keyed, existing, now)

        if self._sqlite_intake is not None:
            async with self._writer_gate():
                stored, extra = await self._sqlite_intake.existing_and_insert(all_keys, build)
            return _with_repeats(stored, extra)
        async with self.transaction(intake=True) as session:
            existing: dict[str, int] = {}
            for i in range(0, len(all_keys), 500):
                found = await session.execute(
                    select(AlertRow.dedup_key, AlertRow.id).where(AlertRow.dedup_key.in_(all_keys[i : i + 500]))
                )
                existing.update({str(key): int(alert_id) for key, alert_id in found.all()})
            batch_rows, alert_rows, stored = build(existing)
            await session.execute(insert(_BATCHES), batch_rows)
            extra = await self._insert_alert_rows(session, alert_rows)
        return _with_repeats(stored, extra)

    async def _insert_alert_rows(self, session: AsyncSession, alert_rows: list[dict[str, Any]]) -> dict[str, int]:
        """Insert-or-ignore the first deliveries; those another writer stored meanwhile become repeats of its
        rows (store/intake_repeats.py). Returns the extra repeats per batch id."""
        first = [a for a in alert_rows if a["dedup_key"] is not None]
        other = [a for a in alert_rows if a["dedup_key"] is None]
        if other:
            await session.execute(insert(_ALERTS), other)
        if not first:
            return {}
        dialect_insert = pg_insert if self.dialect == "postgresql" else sqlite_insert
        statement = dialect_insert(_ALERTS).on_conflict_do_nothing(index_elements=["dedup_key"])
        inserted = set((await session.scalars(statement.returning(_ALERTS.c.dedup_key), first)).all())
        missing = [str(a["dedup_key"]) for a in first if a["dedup_key"] not in inserted]
        if not missing:
            return {}
        held = await session.execute(select(AlertRow.dedup_key, AlertRow.id).where(AlertRow.dedup_key.in_(missing)))
        lost = {str(key): int(alert_id) for key, alert_id in held.all()}
        repeats, extra = as_repeats(first, lost)
        await session.execute(insert(_ALERTS), repeats)
        for batch_id, count in extra.items():
            await session.execute(
                update(_BATCHES).where(_BATCHES.c.id == batch_id).values(repeat_count=_BATCHES.c.repeat_count + count)
            )
        return extra

    async def claim_alerts(
        self, owner: str, limit: int, lease: timedelta, *, look_first: bool = True
    ) -> list[AlertRow]:
        """Claim unprocessed alerts in arrival order (crash-safe: an expired claim is claimable again).

        `look_first=False` when a webhook has just stored alerts: the claiming write goes ahead at once."""
        now = self._clock()
        claimable = (AlertRow.state == "new", or_(AlertRow.claim_expires.is_(None), AlertRow.claim_expires < now))
        # The worker asks every poll interval; most times there is nothing. Look beside the writer first, so an
        # idle poll does not queue other transactions (an admission, a step) behind an empty write.
        if look_first:
            async with self.reading() as session:
                if await session.scalar(select(AlertRow.id).where(*claimable).limit(1)) is None:
                    return []
        expires = now + lease
        async with self.transaction() as session:
            query = select(AlertRow).where(*claimable).order_by(AlertRow.id).limit(limit)
            if self.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            rows = list((await session.scalars(query)).all())
            # One UPDATE per 500 ids, not the unit of work's change tracking and flush of each row: a claim of
            # 1,000 alerts holds SQLite's writer (and the event loop) for a fraction of the time.
            ids = [row.id for row in rows]
            for i in range(0, len(ids), _CLAIM_CHUNK):
                await session.execute(
                    update(_ALERTS).where(_ALERTS.c.id.in_(ids[i : i + _CLAIM_CHUNK]))
                    .values(claimed_by=owner, claim_expires=expires)
                )
            for row in rows:
                set_committed_value(row, "claimed_by", owner)
                set_committed_value(row, "claim_expires", expires)
        return rows

    async def pending_alert_count(self) -> int:
        async with self.reading() as session:
            return int(await session.scalar(select(func.count()).where(AlertRow.state == "new")) or 0)

    async def finish_alert(
        self, alert_id: int, outcome: str, *, note: str | None = None, remediation_id: str | None = None,
        audit_kind: str | None = None, audit_data: dict[str, Any] | None = None,
    ) -> None:
        async with self.transaction() as session:
            await self._finish_alert(session, alert_id, outcome, note=note, remediation_id=remediation_id)
            if audit_kind:
                await self.audit(session, audit_kind, remediation_id=remediation_id, data=audit_data)

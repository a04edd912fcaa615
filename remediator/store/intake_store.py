"""Alert intake: durable batches from the webhook, then claims of new alerts by the worker."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from pydantic import ValidationError
from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from remediator.domain.json_values import JsonObject
from remediator.intake.models import AlertmanagerPayload
from remediator.store.intake_repeats import as_repeats
from remediator.store.intake_rows import AlertValues, BatchValues
from remediator.store.intake_spool import Spooled
from remediator.store.models import (
    AlertBatch,
    AlertRow,
)
from remediator.store.redelivery import decide_again
from remediator.store.transactions import (
    _ALERTS,
    _BATCHES,
    RepositoryBase,
    StoredBatch,
    _intake_rows,
    _with_repeats,
)

__all__ = ["IntakeStore"]

log = logging.getLogger(__name__)

_CLAIM_CHUNK = 500  # ids per claiming UPDATE (well under SQLite's bound-parameter limit)


class IntakeStore(RepositoryBase):
    """Alert intake (a mixin of `Repository`)."""

    async def store_batch(self, payload: AlertmanagerPayload) -> StoredBatch:
        """Commit the batch and each alert in one transaction. Repeats are stored but never processed."""
        return (await self.store_batches([payload]))[0]

    async def store_batches(
        self, payloads: Sequence[AlertmanagerPayload], bodies: Sequence[bytes | None] | None = None
    ) -> list[StoredBatch]:
        """Commit several webhook batches in ONE transaction (group commit); all or none are stored.

        An alert is a repeat when its (fingerprint, startsAt, status) was stored before or earlier in this
        call; repeats are stored with state `repeat` and never processed. `bodies` are the webhooks' raw
        bodies, which the intake spool keeps (see `spool_webhooks`).
        """
        now = self.clock()
        keyed = [_dedup_keys(p) for p in payloads]
        if self._spooling and self._spool is not None:
            raw = bodies or [None] * len(payloads)
            batches = [
                (uuid.uuid4().hex, body if body is not None else p.model_dump_json(by_alias=True).encode(),
                 len(p.alerts))
                for p, body in zip(payloads, raw, strict=True)
            ]
            repeats = await self._spool.append(batches, keyed, now)
            return [StoredBatch(batch_id, count, n) for (batch_id, _, count), n in zip(batches, repeats, strict=True)]
        all_keys = sorted({k for keys in keyed for k in keys})
        originals: list[int] = []  # first deliveries of which this call stores a repeat (store/redelivery.py)

        def build(existing: dict[str, int]) -> tuple[list[BatchValues], list[AlertValues], list[StoredBatch]]:
            originals.extend(existing.values())
            return _intake_rows(payloads, keyed, existing, now)

        if self._sqlite_intake is not None:
            async with self._writer_gate():
                stored, extra = await self._sqlite_intake.existing_and_insert(all_keys, build)
            await decide_again(self, originals)
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
        await decide_again(self, originals)
        return _with_repeats(stored, extra)

    async def spool_webhooks(self) -> None:
        """From now on webhook batches go to the intake spool (store/intake_spool.py), not the database.

        For the web process when the worker runs in a process of its own (SQLite only): the webhook then never
        waits for the worker's write transactions. Creates the spool file before the first webhook."""
        if self._spool is None:
            raise RuntimeError("the intake spool needs a SQLite database file")
        await self._spool.open()
        self._spooling = True

    async def move_spooled(self, max_alerts: int) -> int:
        """Move the oldest spooled webhook batches (up to `max_alerts` alerts) into the database; returns the
        alerts taken from the spool. Repeats are marked again against the database; a batch already there (a
        move interrupted by a crash after its commit) is not inserted twice, one that cannot be read back is
        kept apart in the spool's `rejected` table."""
        if self._spool is None or self._sqlite_intake is None:
            return 0
        spooled = await self._spool.pending(max_alerts)
        if not spooled:
            return 0
        payloads: list[AlertmanagerPayload] = []
        moving: list[Spooled] = []
        rejected: list[tuple[Spooled, str]] = []
        present = await self._present_batches([s.batch_id for s in spooled])
        for entry in spooled:
            if entry.batch_id in present:
                continue
            try:
                payloads.append(AlertmanagerPayload.model_validate_json(entry.body))
            except ValidationError as exc:
                log.error("spooled webhook batch %s (received %s) cannot be read back, kept in %s's `rejected` "
                          "table: %s", entry.batch_id, entry.received_at, self._spool.path.name, exc)
                rejected.append((entry, str(exc)))
                continue
            moving.append(entry)
        if moving:
            keyed = [_dedup_keys(p) for p in payloads]
            ids = [s.batch_id for s in moving]
            received = [datetime.fromisoformat(s.received_at) for s in moving]

            originals: list[int] = []

            def build(existing: dict[str, int]) -> tuple[list[BatchValues], list[AlertValues], None]:
                originals.extend(existing.values())
                batch_rows, alert_rows, _ = _intake_rows(
                    payloads, keyed, existing, received[0], ids=ids, received=received
                )
                return batch_rows, alert_rows, None

            async with self._writer_gate():
                await self._sqlite_intake.existing_and_insert(sorted({k for keys in keyed for k in keys}), build)
            await decide_again(self, originals)  # a repeat of an alert whose remediation did not run
        await self._spool.forget(spooled[-1].seq, rejected)
        return sum(s.alert_count for s in spooled)

    async def spooled_alert_count(self) -> int:
        """Alerts acknowledged into the intake spool and not yet moved into the database."""
        return 0 if self._spool is None else await self._spool.alert_count()

    async def spool_problem(self) -> str | None:
        """Why the intake spool refuses webhooks now (removed, replaced or damaged while in use); None while it
        takes them or when this process does not spool (/readyz)."""
        if not self._spooling or self._spool is None:
            return None
        return await self._spool.problem()

    def watch_spool(self, on_problem: Callable[[str], None]) -> None:
        """Tell `on_problem` of each problem of the intake spool (store/intake_spool.py: DISPLACED, DAMAGED)."""
        if self._spool is not None:
            self._spool.on_problem = on_problem

    async def _present_batches(self, batch_ids: Sequence[str]) -> set[str]:
        async with self.reading() as session:
            found = await session.scalars(select(AlertBatch.id).where(AlertBatch.id.in_(batch_ids)))
            return set(found.all())

    async def _insert_alert_rows(self, session: AsyncSession, alert_rows: list[AlertValues]) -> dict[str, int]:
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
        now = self.clock()
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
        audit_kind: str | None = None, audit_data: JsonObject | None = None,
    ) -> None:
        async with self.transaction() as session:
            await self._finish_alert(session, alert_id, outcome, note=note, remediation_id=remediation_id)
            if audit_kind:
                await self.audit(session, audit_kind, remediation_id=remediation_id, data=audit_data)


def _dedup_keys(payload: AlertmanagerPayload) -> list[str]:
    """Each alert's dedup key: a delivery of the same (fingerprint, startsAt, status) again is a repeat."""
    return [f"{a.fingerprint}|{a.starts_at.isoformat()}|{a.status}" for a in payload.alerts]

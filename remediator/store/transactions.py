"""The store's unit of work: sessions, the writer gate, audit events and the state-machine write every
concern shares. `Repository` (store/repository.py) is this base plus one mixin per concern."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypedDict, cast

from sqlalchemy import Table, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from remediator.domain.json_values import JsonObject, jsonable
from remediator.domain.states import ACTIVE_STATES, FINAL_STATES, Event, State, next_state
from remediator.domain.timestamps import Clock, utc_now
from remediator.errors import LeaseLost, StoreUnavailable
from remediator.intake.models import AlertmanagerPayload
from remediator.store.audit import event_hash
from remediator.store.audit_checkpoint import chain_start
from remediator.store.availability import DatabaseHealth, sqlite_write_check, store_unavailable
from remediator.store.db import READ_ONLY
from remediator.store.intake_rows import AlertValues, BatchValues
from remediator.store.intake_spool import IntakeSpool, spool_path
from remediator.store.models import (
    AlertBatch,
    AlertRow,
    Approval,
    AuditEvent,
    Remediation,
    StepRow,
)
from remediator.store.sqlite_intake import SqliteIntake

__all__ = [
    "BREAKER_MEMO", "INTAKE_PRIORITY_WAIT_S", "LARGE_COLUMNS", "SUPERSEDING_EVENTS", "BreakerMemo",
    "NewRemediation", "RepositoryBase", "StoredBatch",
    "utcnow",
]

# Core tables for the intake hot path: plain executemany, without the ORM's per-row bookkeeping.
_BATCHES = cast(Table, AlertBatch.__table__)
_ALERTS = cast(Table, AlertRow.__table__)
_AUDIT_EVENTS = cast(Table, AuditEvent.__table__)
_AUDIT_LOCK = 7_313_002
_ADMIT_LOCK = 7_313_003
_AUDIT_QUEUE = "remediator.audit_queue"  # session.info key: the events a transaction appends when it commits
# session.info key: the breaker's facts an admission batch reads once under the admission lock and then keeps
# current itself (RemediationStore.admit_many; ReadStore.quarantined_nodes, recent_quarantine_starts).
BREAKER_MEMO = "remediator.breaker_memo"
# The large JSON columns of a remediation, which a list may leave out (`list_remediations(leave_out=...)`).
LARGE_COLUMNS = ("plan", "context", "params", "alert_annotations")
# How long other work yields to queued webhook batches before going anyway (RepositoryBase.intake_first):
# long enough for a burst's group commits to drain, short enough that a sustained flood starves nothing.
INTAKE_PRIORITY_WAIT_S = 0.25


utcnow = utc_now  # the store's default clock is the domain's (domain/timestamps.py)


# Events after which a remediation no longer waits for any approval request (store: `_supersede_approvals`).
SUPERSEDING_EVENTS = frozenset({Event.CANCEL, Event.RETURN})

# An audit event waiting for its transaction's commit: (kind, remediation id, actor, data).
QueuedEvent = tuple[str, str | None, str, Mapping[str, object] | None]


class AuditValues(TypedDict):
    """One `audit_events` row as appended to the chain."""

    ts: datetime
    remediation_id: str | None
    kind: str
    actor: str
    data: JsonObject
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class StoredBatch:
    batch_id: str
    alerts: int
    repeats: int


@dataclass(frozen=True)
class NewRemediation:
    """What the worker decided to start for a firing alert."""

    rule: str
    playbook: str
    definitions_version: str
    target_kind: str
    target_key: str
    node: str | None
    gpu_uuid: str | None
    gpu_index: str | None
    namespace: str | None
    pod: str | None
    params: JsonObject
    plan: JsonObject
    cooldown: timedelta | None


@dataclass
class BreakerMemo:
    """The breaker's facts as an admission batch sees them (`RemediationStore.admit_many`): read once under
    the admission lock (`ReadStore.quarantined_nodes`, `recent_quarantine_starts`, `held_for_room_before`),
    then kept current by the batch as it starts quarantines and holds or admits remediations. None until
    read. Only admissions hold a remediation and they all take the lock, so no other replica adds to the
    queue meanwhile; one that leaves it otherwise (cancelled) is still counted ahead until the next batch,
    which only makes a remediation wait one re-check longer."""

    quarantined: set[str] | None = None
    starts: int | None = None
    # The held remediations whose reason starts with `held_prefix` (the queue for room,
    # `ReadStore.held_for_room_before`): id -> (created_at, node).
    held: dict[str, tuple[datetime, str]] | None = None
    held_prefix: str = ""

    def started(self, node: str | None) -> None:
        """The batch started a quarantine of `node`."""
        if node and self.quarantined is not None:
            self.quarantined.add(node)
        if self.starts is not None:
            self.starts += 1

    def decided(self, rem: Remediation) -> None:
        """The batch just held, or admitted, `rem`: the queue for room follows."""
        if self.held is None:
            return
        reason = rem.state_reason or ""
        if rem.state == State.HELD and rem.node and reason.startswith(self.held_prefix):
            self.held[rem.id] = (rem.created_at, rem.node)
        else:
            self.held.pop(rem.id, None)


class RepositoryBase:
    """Thin, explicit persistence API over an async sessionmaker (the parts every concern uses)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Clock = utcnow) -> None:
        self._sessions = sessions
        self.clock: Clock = clock  # the one injected clock (domain/timestamps.py); `Runtime.clock` hands it out
        # Cleared while webhook batches are waiting to be committed (see IntakeWriter).
        self.intake_idle = asyncio.Event()
        self.intake_idle.set()
        bind = sessions.kw.get("bind")
        self.dialect = bind.dialect.name if bind is not None else "sqlite"
        self._read_bind = bind.execution_options(**{READ_ONLY: True}) if bind is not None else None
        self._sqlite_lock: asyncio.Lock | None = asyncio.Lock() if self.dialect == "sqlite" else None
        self.audit_key: bytes | None = None  # HMAC key of the audit chain (settings.audit_key_bytes())
        database = bind.url.database if bind is not None else None
        self._sqlite_intake = (
            SqliteIntake(database) if self.dialect == "sqlite" and database and database != ":memory:" else None
        )
        # The webhook intake's spool (store/intake_spool.py): where this process's webhooks go when the worker
        # runs in a process of its own (`spool_webhooks`), and where any worker looks for batches to move.
        file = Path(database).resolve() if self._sqlite_intake is not None and database else None
        self._spool = IntakeSpool(spool_path(file), file) if file is not None else None
        self.health = DatabaseHealth()  # the database as this process's store calls found it
        self._sqlite_file = str(file) if file is not None else None
        self._spooling = False

    @asynccontextmanager
    async def transaction(self, *, intake: bool = False) -> AsyncIterator[AsyncSession]:
        """One transaction; database failures surface as StoreUnavailable.

        Webhook intake has priority: other transactions of this process wait (briefly, see intake_first)
        while intake is queued, so a storm is stored first (and answered fast) and processed right after.
        """
        if not intake:
            await self.intake_first()
        async with self._writer_gate(), self._classified(), self._sessions() as session, session.begin():
            yield session
            await self._append_audit(session)  # last: the chain's lock is held only to the commit
        self.health.answered()

    async def intake_first(self) -> None:
        """Let queued webhook batches go first, for at most INTAKE_PRIORITY_WAIT_S.

        Bounded: under a sustained flood intake is never idle, and an unbounded wait would starve every
        decision, step and lease renewal while alerts pile up unprocessed."""
        if self.intake_idle.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(INTAKE_PRIORITY_WAIT_S):
                await self.intake_idle.wait()

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncSession]:
        """A read-only transaction, beside the writers: SQLite in WAL mode lets readers run while one
        connection writes, so reads need not queue at the writer gate. Nothing may be written in it."""
        sessions = self._sessions(bind=self._read_bind) if self._read_bind is not None else self._sessions()
        async with self._classified(), sessions as session, session.begin():
            yield session
            if session.new or session.dirty or session.deleted:
                raise RuntimeError("a read-only transaction changed rows")
        self.health.answered()

    @asynccontextmanager
    async def _classified(self) -> AsyncIterator[None]:
        """Database failures inside it raised as what the one classifier (store/availability.py) makes of them:
        a transient one as StoreUnavailable, anything else unchanged. Shared by `transaction` and `reading`."""
        try:
            yield
        # broad: any driver or SQLAlchemy error goes to the one classifier; what it does not call unavailable is
        # re-raised unchanged
        except Exception as exc:
            error = self._unavailable(exc)
            if error is exc:
                raise
            raise error from exc

    def _unavailable(self, exc: Exception) -> Exception:
        """What a failed transaction raises: a transient database failure as StoreUnavailable (and counted in
        `health`), anything else (the caller's own exceptions included) as it is."""
        error = store_unavailable(exc)
        if error is None:
            return exc
        self.health.failed(error)
        return error

    @asynccontextmanager
    async def _writer_gate(self) -> AsyncIterator[None]:
        """SQLite has one writer: queue this process's transactions here rather than in SQLite's busy
        handler, whose sleeps (up to 100 ms each) would dominate latency under load."""
        if self._sqlite_lock is None:
            yield
            return
        async with self._sqlite_lock:
            yield

    async def ping(self) -> None:
        async with self.transaction() as session:
            await session.execute(text("SELECT 1"))

    async def check_ready(self, timeout: float) -> None:
        """Raise StoreUnavailable (with its `reason`) unless the database takes a transaction within `timeout`
        seconds and the replica guard is held (for /readyz, whose probe gives up after a few seconds).

        A SQLite file's write lock is tried on a connection of its own, waiting half of `timeout` for it: the
        engine's would wait BUSY_TIMEOUT_S for a file locked by another connection."""
        guard = self.health.guard
        if guard is not None and guard.problem is not None:
            error = StoreUnavailable(guard.problem)
            error.reason = "unreachable"
            raise error
        try:
            async with asyncio.timeout(timeout):
                if self._sqlite_file is not None:
                    await asyncio.to_thread(sqlite_write_check, self._sqlite_file, timeout / 2)
                await self.ping()
        except TimeoutError:
            error = StoreUnavailable(f"the database did not answer within {timeout:g} s")
            error.reason = "timeout"
            self.health.failed(error)
            raise error from None
        # broad: any driver or SQLAlchemy error goes to the one classifier (store/availability.py); what it does not
        # call unavailable is re-raised unchanged
        except Exception as exc:
            classified = self._unavailable(exc)
            if classified is exc:
                raise
            raise classified from exc

    async def _lock(self, session: AsyncSession, key: int) -> None:
        if self.dialect == "postgresql":
            await session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})

    async def audit(
        self,
        session: AsyncSession,
        kind: str,
        *,
        remediation_id: str | None = None,
        actor: str = "controller",
        data: Mapping[str, object] | None = None,
    ) -> None:
        """Add one hash-chained event to the caller's transaction (appended when it commits, see below)."""
        self._audit_queue(session).append((kind, remediation_id, actor, data))

    async def audit_many(
        self, session: AsyncSession, events: Sequence[tuple[str, str | None, Mapping[str, object] | None]],
        *, actor: str = "controller",
    ) -> None:
        """Add several events to the caller's transaction, in order."""
        self._audit_queue(session).extend((kind, remediation_id, actor, data) for kind, remediation_id, data in events)

    @staticmethod
    def _audit_queue(session: AsyncSession) -> list[QueuedEvent]:
        queue = session.info.get(_AUDIT_QUEUE)
        if queue is None:
            if not session.in_transaction():
                raise RuntimeError("audit events are added inside Repository.transaction()")
            queue = session.info[_AUDIT_QUEUE] = []
        return cast(list[QueuedEvent], queue)

    async def _append_audit(self, session: AsyncSession) -> None:
        """Append the transaction's events to the chain in one insert, as its last statement.

        Appending takes the chain's lock (PostgreSQL: an advisory lock held to the commit), which orders every
        audited transaction of every replica. Taken last, it is held for one read, one insert and the commit;
        taken at the first event, it was held through the rest of the transaction (an admission's guardrail
        reads), and transactions queued behind it: the storm's admissions across replicas, one at a time.
        """
        queue = session.info.pop(_AUDIT_QUEUE, None)
        if not queue:
            return
        await session.flush()  # the rows the events name (a new remediation) go first
        prev_hash = await self._chain_head(session)
        rows: list[AuditValues] = []
        for kind, remediation_id, actor, data in queue:
            row = self._chained(kind, remediation_id, actor, data, prev_hash)
            rows.append(row)
            prev_hash = row["hash"]
        await session.execute(insert(_AUDIT_EVENTS), rows)

    async def _chain_head(self, session: AsyncSession) -> str:
        """The hash the next event chains to, under the audit lock (held to the end of the transaction)."""
        await self._lock(session, _AUDIT_LOCK)
        prev = await session.scalar(select(AuditEvent.hash).order_by(AuditEvent.id.desc()).limit(1))
        return prev or await chain_start(session)

    def _chained(
        self, kind: str, remediation_id: str | None, actor: str, data: Mapping[str, object] | None, prev_hash: str
    ) -> AuditValues:
        ts = self.clock()
        payload: JsonObject = jsonable(data or {})
        digest = event_hash(
            ts=ts, remediation_id=remediation_id, kind=kind, actor=actor, data=payload, prev_hash=prev_hash,
            key=self.audit_key,
        )
        return {"ts": ts, "remediation_id": remediation_id, "kind": kind, "actor": actor, "data": payload,
                "prev_hash": prev_hash, "hash": digest}

    async def close(self) -> None:
        if self._sqlite_intake is not None:
            await self._sqlite_intake.close()
        if self._spool is not None:
            await self._spool.close()

    async def _finish_alert(
        self, session: AsyncSession, alert_id: int, outcome: str, *, note: str | None, remediation_id: str | None
    ) -> None:
        await session.execute(
            update(AlertRow)
            .where(AlertRow.id == alert_id)
            .values(state="done", outcome=outcome, note=note, remediation_id=remediation_id,
                    processed_at=self.clock(), claim_expires=None)
        )

    async def _has_done_steps(self, session: AsyncSession, rem_id: str) -> bool:
        count = await session.scalar(
            select(func.count()).where(
                StepRow.remediation_id == rem_id, StepRow.phase == "forward",
                StepRow.status.in_(("succeeded", "running")),
            )
        )
        return bool(count)

    async def _transition(
        self, session: AsyncSession, rem: Remediation, event: str, *, reason: str | None = None,
        actor: str = "controller", data: Mapping[str, object] | None = None,
    ) -> str:
        old = rem.state
        new = next_state(old, event)
        now = self.clock()
        rem.state = new
        rem.state_reason = reason
        rem.updated_at = now
        if new in FINAL_STATES:
            rem.finished_at = now
            rem.active_key = None
            rem.lease_owner = None
            rem.lease_expires = None
        if new not in ACTIVE_STATES or new == State.REVERTING:
            rem.active_key = None
        if (
            new in (State.CANCELLED, State.REJECTED, State.EXPIRED, State.FAILED)
            and rem.quarantined
            and not await self._has_done_steps(session, rem.id)
        ):
            rem.quarantined = False  # nothing was changed: the node is not under our quarantine
        await self.audit(
            session, f"state.{new}", remediation_id=rem.id, actor=actor,
            data={"from": old, "to": new, "event": event, "reason": reason, **(data or {})},
        )
        if event in SUPERSEDING_EVENTS:
            await self._supersede_approvals(session, rem.id, actor=actor, event=event, now=now)
        return new

    async def _supersede_approvals(
        self, session: AsyncSession, rem_id: str, *, actor: str, event: str, now: datetime
    ) -> list[int]:
        """Close every open approval request of a remediation that was cancelled or returned: `superseded`,
        by whom (`decided_by`), when, and by what (`decision_source` = the event), each with its audit event.
        Approving one afterwards answers that it was superseded instead of a bare 409."""
        ids = list((await session.scalars(
            select(Approval.id).where(Approval.remediation_id == rem_id, Approval.decision.is_(None))
        )).all())
        if not ids:
            return []
        await session.execute(
            update(Approval).where(Approval.id.in_(ids), Approval.decision.is_(None))
            .values(decision="superseded", decided_by=actor[:256], decided_at=now, decision_source=event)
            .execution_options(synchronize_session=False)
        )
        for approval_id in ids:
            await self.audit(session, "approval.superseded", remediation_id=rem_id, actor=actor,
                             data={"approval_id": approval_id, "by": event})
        return ids

    async def _start_revert(self, session: AsyncSession, rem: Remediation, reason: str) -> None:
        await self._transition(session, rem, Event.REVERT, reason=reason)
        rem.return_request = None  # a plain undo ends `reverted`, whatever an earlier return asked
        rem.current_step = 0
        rem.next_run_at = self.clock()
        rem.crashes, rem.not_before = 0, None  # the undo gets its own crash budget

    async def _get_for_update(self, session: AsyncSession, rem_id: str, owner: str | None) -> Remediation:
        query = select(Remediation).where(Remediation.id == rem_id)
        if self.dialect == "postgresql":
            query = query.with_for_update()
        rem = await session.scalar(query)
        if rem is None:
            raise KeyError(rem_id)
        if owner is not None and rem.lease_owner != owner:
            raise LeaseLost(rem_id)
        return rem

    async def record_audit(
        self, kind: str, *, remediation_id: str | None = None, actor: str = "controller",
        data: Mapping[str, object] | None = None,
    ) -> None:
        """Append one audit event on its own (for facts that change no row, e.g. a failed notification)."""
        async with self.transaction() as session:
            await self.audit(session, kind, remediation_id=remediation_id, actor=actor, data=data)


def _with_repeats(stored: list[StoredBatch], extra: dict[str, int]) -> list[StoredBatch]:
    """`stored` with each batch's repeat count raised by the first deliveries it lost to another writer."""
    return [StoredBatch(s.batch_id, s.alerts, s.repeats + extra.get(s.batch_id, 0)) for s in stored]


def _intake_rows(
    payloads: Sequence[AlertmanagerPayload], keyed: list[list[str]], existing: dict[str, int], now: datetime,
    *, ids: Sequence[str] | None = None, received: Sequence[datetime] | None = None,
) -> tuple[list[BatchValues], list[AlertValues], list[StoredBatch]]:
    """Rows for alert_batches and alerts, marking repeats (seen before, or earlier in this group).

    `ids` and `received` (batch ids and arrival times) are given for batches moved from the intake spool;
    otherwise new ids are made and every batch arrived `now`."""
    seen: set[str] = set()
    repeats: list[list[bool]] = []
    for keys in keyed:
        flags = []
        for key in keys:
            flags.append(key in existing or key in seen)
            seen.add(key)
        repeats.append(flags)
    if ids is None:
        ids = [uuid.uuid4().hex for _ in payloads]
    if received is None:
        received = [now] * len(payloads)
    batch_rows: list[BatchValues] = [
        {
            "id": batch_id, "received_at": at, "receiver": p.receiver, "status": p.status,
            "group_key": p.group_key, "external_url": p.external_url,
            "truncated_alerts": p.truncated_alerts, "alert_count": len(p.alerts), "repeat_count": sum(flags),
        }
        for p, flags, batch_id, at in zip(payloads, repeats, ids, received, strict=True)
    ]
    alert_rows: list[AlertValues] = [
        {
            "batch_id": batch_id, "fingerprint": a.fingerprint, "alertname": a.alertname,
            "status": a.status, "starts_at": a.starts_at, "ends_at": a.ends_at, "labels": dict(a.labels),
            "annotations": dict(a.annotations), "generator_url": a.generator_url, "received_at": at,
            "dedup_key": None if repeat else key, "repeat_of": existing.get(key),
            "state": "repeat" if repeat else "new",
        }
        for p, keys, flags, batch_id, at in zip(payloads, keyed, repeats, ids, received, strict=True)
        for a, key, repeat in zip(p.alerts, keys, flags, strict=True)
    ]
    stored = [
        StoredBatch(batch_id, len(p.alerts), sum(flags))
        for p, flags, batch_id in zip(payloads, repeats, ids, strict=True)
    ]
    return batch_rows, alert_rows, stored

"""All reads and writes of the store. Routes and the worker call these; nobody writes SQL inline.

Every state change is written with its audit event in the same transaction. Writes made on behalf of a
worker check its lease (`owner`), so a replica that lost its lease cannot record a step twice.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, case, false, func, insert, or_, select, text, true, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import defer

from remediator.engine.states import ACTIVE_STATES, FINAL_STATES, TRANSITIONS, next_state
from remediator.errors import StoreUnavailable
from remediator.intake.models import AlertmanagerPayload
from remediator.store.audit import canonical, event_hash
from remediator.store.audit_checkpoint import chain_start
from remediator.store.definition_versions import DefinitionVersion
from remediator.store.intake_repeats import as_repeats
from remediator.store.models import (
    AlertBatch,
    AlertRow,
    Approval,
    AuditEvent,
    ControllerState,
    Remediation,
    SlackMessage,
    StepRow,
)
from remediator.store.sqlite_intake import SqliteIntake

__all__ = ["LARGE_COLUMNS", "LeaseLost", "NewRemediation", "Repository", "StoredBatch", "utcnow"]

# Core tables for the intake hot path: plain executemany, without the ORM's per-row bookkeeping.
_BATCHES = cast(Table, AlertBatch.__table__)
_ALERTS = cast(Table, AlertRow.__table__)
_AUDIT_LOCK = 7_313_002
_ADMIT_LOCK = 7_313_003
# The large JSON columns of a remediation, which a list may leave out (`list_remediations(leave_out=...)`).
LARGE_COLUMNS = ("plan", "context", "params", "alert_annotations")


def utcnow() -> datetime:
    return datetime.now(UTC)


class LeaseLost(Exception):
    """This worker no longer owns the remediation; another replica took it over."""


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
    params: dict[str, Any]
    plan: dict[str, Any]
    cooldown: timedelta | None


def _jsonable(value: Any) -> Any:
    return json.loads(canonical(value))


def _aware(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


class Repository:
    """Thin, explicit persistence API over an async sessionmaker."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Callable[[], datetime] = utcnow) -> None:
        self._sessions = sessions
        self._clock = clock
        # Cleared while webhook batches are waiting to be committed (see IntakeWriter).
        self.intake_idle = asyncio.Event()
        self.intake_idle.set()
        bind = sessions.kw.get("bind")
        self.dialect = bind.dialect.name if bind is not None else "sqlite"
        self._sqlite_lock: asyncio.Lock | None = asyncio.Lock() if self.dialect == "sqlite" else None
        self.audit_key: bytes | None = None  # HMAC key of the audit chain (settings.audit_key_bytes())
        database = bind.url.database if bind is not None else None
        self._sqlite_intake = (
            SqliteIntake(database) if self.dialect == "sqlite" and database and database != ":memory:" else None
        )

    # -- plumbing ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self, *, intake: bool = False) -> AsyncIterator[AsyncSession]:
        """One transaction; database failures surface as StoreUnavailable.

        Webhook intake has priority: other transactions of this process wait while intake is queued, so a
        storm is stored first (and answered fast) and processed right after.
        """
        if not intake:
            await self.intake_idle.wait()
        async with self._writer_gate():
            try:
                async with self._sessions() as session, session.begin():
                    yield session
            except (OperationalError, OSError, ConnectionError) as exc:
                raise StoreUnavailable(str(exc).splitlines()[0]) from exc

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
        data: dict[str, Any] | None = None,
    ) -> AuditEvent:
        """Append one hash-chained event inside the caller's transaction."""
        await self._lock(session, _AUDIT_LOCK)
        prev = await session.scalar(select(AuditEvent.hash).order_by(AuditEvent.id.desc()).limit(1))
        prev_hash = prev or await chain_start(session)
        ts = self._clock()
        payload = _jsonable(data or {})
        digest = event_hash(
            ts=ts, remediation_id=remediation_id, kind=kind, actor=actor, data=payload, prev_hash=prev_hash,
            key=self.audit_key,
        )
        event = AuditEvent(
            ts=ts, remediation_id=remediation_id, kind=kind, actor=actor, data=payload, prev_hash=prev_hash,
            hash=digest,
        )
        session.add(event)
        await session.flush()
        return event

    # -- intake -----------------------------------------------------------------------------------

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

    async def close(self) -> None:
        if self._sqlite_intake is not None:
            await self._sqlite_intake.close()

    async def claim_alerts(self, owner: str, limit: int, lease: timedelta) -> list[AlertRow]:
        """Claim unprocessed alerts in arrival order (crash-safe: an expired claim is claimable again)."""
        now = self._clock()
        async with self.transaction() as session:
            query = (
                select(AlertRow)
                .where(AlertRow.state == "new", or_(AlertRow.claim_expires.is_(None), AlertRow.claim_expires < now))
                .order_by(AlertRow.id)
                .limit(limit)
            )
            if self.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            rows = list((await session.scalars(query)).all())
            for row in rows:
                row.claimed_by = owner
                row.claim_expires = now + lease
        return rows

    async def pending_alert_count(self) -> int:
        async with self.transaction() as session:
            return int(await session.scalar(select(func.count()).where(AlertRow.state == "new")) or 0)

    async def finish_alert(
        self, alert_id: int, outcome: str, *, note: str | None = None, remediation_id: str | None = None,
        audit_kind: str | None = None, audit_data: dict[str, Any] | None = None,
    ) -> None:
        async with self.transaction() as session:
            await self._finish_alert(session, alert_id, outcome, note=note, remediation_id=remediation_id)
            if audit_kind:
                await self.audit(session, audit_kind, remediation_id=remediation_id, data=audit_data)

    async def _finish_alert(
        self, session: AsyncSession, alert_id: int, outcome: str, *, note: str | None, remediation_id: str | None
    ) -> None:
        await session.execute(
            update(AlertRow)
            .where(AlertRow.id == alert_id)
            .values(state="done", outcome=outcome, note=note, remediation_id=remediation_id,
                    processed_at=self._clock(), claim_expires=None)
        )

    async def record_firing(self, alert: AlertRow, new: NewRemediation) -> tuple[str, str]:
        """Start a remediation for a firing alert, or link it to the active one, or respect the cooldown.

        Returns (outcome, remediation_id or ""). Outcome is `started`, `linked` or `cooldown`.
        """
        active_key = f"{new.target_key}|{new.playbook}"
        for _ in range(3):
            try:
                async with self.transaction() as session:
                    return await self._record_firing(session, alert, new, active_key)
            except IntegrityError:
                continue  # another replica started the same remediation a moment ago: link to it
        raise StoreUnavailable("could not record alert after concurrent starts")

    async def _record_firing(
        self, session: AsyncSession, alert: AlertRow, new: NewRemediation, active_key: str
    ) -> tuple[str, str]:
        now = self._clock()
        active = await session.scalar(select(Remediation).where(Remediation.active_key == active_key))
        if active is not None:
            active.linked_alerts += 1
            await self._finish_alert(session, alert.id, "linked", note=None, remediation_id=active.id)
            await self.audit(
                session, "alert.linked", remediation_id=active.id,
                data={"alert_id": alert.id, "fingerprint": alert.fingerprint, "alertname": alert.alertname},
            )
            return "linked", active.id
        if new.cooldown:
            recent = await session.scalar(
                select(Remediation.id)
                .where(
                    Remediation.rule == new.rule, Remediation.target_key == new.target_key,
                    Remediation.finished_at.is_not(None), Remediation.finished_at > now - new.cooldown,
                )
                .limit(1)
            )
            if recent is not None:
                await self._finish_alert(session, alert.id, "cooldown", note=f"cooldown after {recent}",
                                         remediation_id=recent)
                await self.audit(session, "alert.cooldown", remediation_id=recent,
                                 data={"alert_id": alert.id, "rule": new.rule, "target": new.target_key})
                return "cooldown", recent
        rem_id = str(uuid.uuid4())
        session.add(
            Remediation(
                id=rem_id, created_at=now, updated_at=now, finished_at=None, state="pending", state_reason=None,
                rule=new.rule, playbook=new.playbook, definitions_version=new.definitions_version,
                target_kind=new.target_kind, target_key=new.target_key, node=new.node, gpu_uuid=new.gpu_uuid,
                gpu_index=new.gpu_index, namespace=new.namespace, pod=new.pod, alert_id=alert.id,
                alert_fingerprint=alert.fingerprint, alertname=alert.alertname, alert_labels=dict(alert.labels),
                alert_annotations=dict(alert.annotations), alert_resolved=False, params=_jsonable(new.params),
                plan=_jsonable(new.plan), context={}, phase="forward", current_step=0, active_key=active_key,
                quarantined=False, linked_alerts=0, next_run_at=now,
            )
        )
        await session.flush()
        await self._finish_alert(session, alert.id, "started", note=None, remediation_id=rem_id)
        await self.audit(
            session, "remediation.created", remediation_id=rem_id,
            data={"rule": new.rule, "playbook": new.playbook, "target": new.target_key, "alert_id": alert.id,
                  "alertname": alert.alertname, "definitions_version": new.definitions_version},
        )
        return "started", rem_id

    async def record_resolved(self, alert: AlertRow) -> list[tuple[str, str]]:
        """Apply a resolved alert: cancel what has not acted, mark running ones, revert finished ones.

        Returns (remediation_id, what happened) pairs.
        """
        results: list[tuple[str, str]] = []
        async with self.transaction() as session:
            rows = (
                await session.scalars(
                    select(Remediation)
                    .where(Remediation.alert_fingerprint == alert.fingerprint, Remediation.alert_resolved.is_(False))
                    .order_by(Remediation.created_at)
                )
            ).all()
            for rem in rows:
                rem.alert_resolved = True
                on_resolved = str(rem.plan.get("playbook", {}).get("on_resolved", "keep"))
                if rem.state in ("pending", "held", "awaiting_approval"):
                    await self._transition(session, rem, "cancel", reason="alert resolved", actor="alertmanager")
                    results.append((rem.id, "cancelled"))
                    if on_resolved == "revert" and await self._has_done_steps(session, rem.id):
                        await self._start_revert(session, rem, "alert resolved")
                        results[-1] = (rem.id, "cancelled+reverting")
                elif rem.state == "running":
                    results.append((rem.id, "marked"))
                elif rem.state in ("succeeded", "failed") and on_resolved == "revert":
                    await self._start_revert(session, rem, "alert resolved")
                    results.append((rem.id, "reverting"))
                else:
                    results.append((rem.id, "unchanged"))
            await self._finish_alert(
                session, alert.id, "resolved", note=None, remediation_id=results[0][0] if results else None
            )
            await self.audit(
                session, "alert.resolved", remediation_id=results[0][0] if results else None,
                data={"alert_id": alert.id, "fingerprint": alert.fingerprint, "alertname": alert.alertname,
                      "effects": [{"remediation": r, "effect": e} for r, e in results]},
            )
        return results

    async def _has_done_steps(self, session: AsyncSession, rem_id: str) -> bool:
        count = await session.scalar(
            select(func.count()).where(
                StepRow.remediation_id == rem_id, StepRow.phase == "forward",
                StepRow.status.in_(("succeeded", "running")),
            )
        )
        return bool(count)

    # -- state machine ----------------------------------------------------------------------------

    async def _transition(
        self, session: AsyncSession, rem: Remediation, event: str, *, reason: str | None = None,
        actor: str = "controller", data: dict[str, Any] | None = None,
    ) -> str:
        old = rem.state
        new = next_state(old, event)
        now = self._clock()
        rem.state = new
        rem.state_reason = reason
        rem.updated_at = now
        if new in FINAL_STATES:
            rem.finished_at = now
            rem.active_key = None
            rem.lease_owner = None
            rem.lease_expires = None
        if new not in ACTIVE_STATES or new == "reverting":
            rem.active_key = None
        if (
            new in ("cancelled", "rejected", "expired", "failed")
            and rem.quarantined
            and not await self._has_done_steps(session, rem.id)
        ):
            rem.quarantined = False  # nothing was changed: the node is not under our quarantine
        await self.audit(
            session, f"state.{new}", remediation_id=rem.id, actor=actor,
            data={"from": old, "to": new, "event": event, "reason": reason, **(data or {})},
        )
        return new

    async def _start_revert(self, session: AsyncSession, rem: Remediation, reason: str) -> None:
        await self._transition(session, rem, "revert", reason=reason)
        rem.phase = "revert"
        rem.current_step = 0
        rem.next_run_at = self._clock()
        rem.crashes, rem.not_before = 0, None  # the undo gets its own crash budget

    async def transition(
        self, rem_id: str, event: str, *, reason: str | None = None, actor: str = "controller",
        owner: str | None = None, data: dict[str, Any] | None = None,
        changes: dict[str, Any] | None = None,
    ) -> Remediation:
        """Move one remediation by `event` (checked against the table) and audit it, atomically."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            await self._transition(session, rem, event, reason=reason, actor=actor, data=data)
            for key, value in (changes or {}).items():
                setattr(rem, key, value)
            return rem

    async def start_revert(self, rem_id: str, reason: str, *, actor: str = "controller") -> Remediation:
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, None)
            await self._transition(session, rem, "revert", reason=reason, actor=actor)
            rem.phase = "revert"
            rem.current_step = 0
            rem.next_run_at = self._clock()
            rem.crashes, rem.not_before = 0, None  # the undo gets its own crash budget
            return rem

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

    # -- worker claims and leases -----------------------------------------------------------------

    async def claim_remediations(self, owner: str, limit: int, lease: timedelta) -> list[str]:
        """Claim runnable remediations whose lease is free or expired (a dead replica's work resumes)."""
        now = self._clock()
        async with self.transaction() as session:
            query = (
                select(Remediation)
                .where(
                    Remediation.state.in_(("pending", "running", "reverting", "held")),
                    or_(Remediation.lease_expires.is_(None), Remediation.lease_expires < now),
                    or_(Remediation.next_run_at.is_(None), Remediation.next_run_at <= now),
                    or_(Remediation.not_before.is_(None), Remediation.not_before <= now),  # crash backoff
                )
                .order_by(case((Remediation.state == "held", 1), else_=0), Remediation.created_at)
                .limit(limit)
            )
            if self.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            rows = (await session.scalars(query)).all()
            for rem in rows:
                rem.lease_owner = owner
                rem.lease_expires = now + lease
            return [r.id for r in rows]

    async def renew_lease(self, rem_id: str, owner: str, lease: timedelta) -> bool:
        async with self.transaction() as session:
            result = await session.execute(
                update(Remediation)
                .where(Remediation.id == rem_id, Remediation.lease_owner == owner)
                .values(lease_expires=self._clock() + lease)
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]

    async def release_lease(self, rem_id: str, owner: str, *, next_run_in: timedelta | None = None) -> None:
        async with self.transaction() as session:
            values: dict[str, Any] = {"lease_owner": None, "lease_expires": None}
            if next_run_in is not None:
                values["next_run_at"] = self._clock() + next_run_in
            await session.execute(
                update(Remediation).where(Remediation.id == rem_id, Remediation.lease_owner == owner).values(**values)
            )

    async def record_crash(
        self, rem_id: str, owner: str, *, error: str, backoff: timedelta, backoff_max: timedelta, max_crashes: int
    ) -> tuple[int, datetime | None]:
        """Count an unexpected failure of the driver: back off, and end the remediation after `max_crashes`.

        `backoff` is the wait after the first crash; each further crash in a row doubles it, up to
        `backoff_max`. Returns (crashes in a row, not-before time; None when the remediation is now `failed`).
        The count starts over whenever a step result is recorded (`finish_step`).
        """
        now = self._clock()
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            rem.crashes = (rem.crashes or 0) + 1
            rem.error = error
            rem.updated_at = now
            ends = rem.crashes >= max_crashes and (rem.state, "crash") in TRANSITIONS
            wait = None if ends else min(backoff * 2 ** min(rem.crashes - 1, 30), backoff_max)
            not_before = None if wait is None else now + wait
            await self.audit(
                session, "remediation.crashed", remediation_id=rem_id,
                data={"crashes": rem.crashes, "max_crashes": max_crashes, "error": error, "state": rem.state,
                      "backoff_seconds": None if wait is None else wait.total_seconds(),
                      "not_before": None if not_before is None else not_before.isoformat()},
            )
            if ends:
                await self._transition(
                    session, rem, "crash", reason=f"crashed {rem.crashes} times in a row; last error: {error}",
                    data={"crashes": rem.crashes, "error": error},
                )
            rem.not_before = not_before
            return rem.crashes, not_before

    async def note_revert_pause(self, rem_id: str, owner: str, *, paused: bool, reason: str) -> None:
        """Record that an undo stopped for the pause switch (`revert.paused`) or goes on (`revert.resumed`)."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            rem.state_reason = reason
            rem.updated_at = self._clock()
            await self.audit(session, "revert.paused" if paused else "revert.resumed", remediation_id=rem_id,
                             data={"reason": reason, "step": rem.current_step})

    async def set_context(self, rem_id: str, owner: str, context: dict[str, Any]) -> None:
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            rem.context = _jsonable(context)
            await self.audit(session, "context.gathered", remediation_id=rem_id,
                             data={"pods": len(context.get("pods", [])), "source": context.get("pod_source")})

    async def admit(
        self, rem_id: str, owner: str, decide: Callable[[Any], Any], facts: Callable[[AsyncSession], Any]
    ) -> tuple[str, Any, bool]:
        """Guardrail decision and the quarantine it admits, serialized across replicas.

        `facts(session)` reads what the decision needs in this transaction; `decide(facts)` returns a
        verdict with `.allow`, `.name`, `.reason`, `.quarantines`. Returns (new state, verdict, changed):
        `changed` is False when a held remediation is still held for the same reason.
        """
        async with self.transaction() as session:
            await self._lock(session, _ADMIT_LOCK)
            rem = await self._get_for_update(session, rem_id, owner)
            gathered = await facts(session)
            verdict = decide(gathered)
            if verdict.allow:
                if rem.state == "held":
                    await self._transition(session, rem, "release", reason="guardrails allow")
                await self._transition(session, rem, "start", reason=verdict.reason)
                rem.quarantined = bool(verdict.quarantines)
                if rem.quarantined:
                    await self.audit(session, "quarantine.started", remediation_id=rem.id, data={"node": rem.node})
                return rem.state, verdict, True
            if rem.state == "held" and rem.state_reason == verdict.reason:
                return rem.state, verdict, False
            await self._transition(session, rem, "hold", reason=verdict.reason, data={"guardrail": verdict.name})
            return rem.state, verdict, True

    # -- steps ------------------------------------------------------------------------------------

    async def begin_step(
        self, rem_id: str, owner: str, *, phase: str, idx: int, name: str, action: str, params: dict[str, Any]
    ) -> StepRow:
        """Create or resume the step row; a resumed step keeps its saved progress and counts the attempt."""
        async with self.transaction() as session:
            await self._get_for_update(session, rem_id, owner)
            step = await session.scalar(
                select(StepRow).where(StepRow.remediation_id == rem_id, StepRow.phase == phase, StepRow.idx == idx)
            )
            now = self._clock()
            resumed = step is not None
            if step is None:
                step = StepRow(
                    remediation_id=rem_id, phase=phase, idx=idx, name=name, action=action, status="running",
                    attempts=1, params=_jsonable(params), output={}, progress={}, error=None, started_at=now,
                )
                session.add(step)
            else:
                step.attempts += 1
                step.status = "running"
                step.params = _jsonable(params)
            await session.flush()
            await self.audit(
                session, "step.started", remediation_id=rem_id,
                data={"phase": phase, "step": name, "action": action, "index": idx, "attempt": step.attempts,
                      "resumed": resumed, "params": params},
            )
            return step

    async def checkpoint_step(self, rem_id: str, owner: str, *, phase: str, idx: int, progress: dict[str, Any]) -> None:
        async with self.transaction() as session:
            await self._get_for_update(session, rem_id, owner)
            await session.execute(
                update(StepRow)
                .where(StepRow.remediation_id == rem_id, StepRow.phase == phase, StepRow.idx == idx)
                .values(progress=_jsonable(progress))
            )

    async def finish_step(
        self, rem_id: str, owner: str, *, phase: str, idx: int, name: str, action: str, status: str,
        output: dict[str, Any] | None = None, error: str | None = None, advance: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Record a step's result and move the cursor, with its audit event, in one transaction."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            step = await session.scalar(
                select(StepRow).where(StepRow.remediation_id == rem_id, StepRow.phase == phase, StepRow.idx == idx)
            )
            now = self._clock()
            if step is None:
                step = StepRow(
                    remediation_id=rem_id, phase=phase, idx=idx, name=name, action=action, status=status,
                    attempts=0, params={}, output={}, progress={}, started_at=now,
                )
                session.add(step)
            step.status = status
            step.output = _jsonable(output or {})
            step.error = error
            step.finished_at = now
            if advance:
                rem.current_step = idx + 1
            rem.updated_at = now
            rem.crashes = 0  # a recorded step result is progress: crash backoff starts over
            await self.audit(
                session, f"step.{status}", remediation_id=rem_id,
                data={"phase": phase, "step": name, "action": action, "index": idx, "error": error,
                      "output": output or {}, **(extra or {})},
            )

    # -- controller state -------------------------------------------------------------------------

    async def get_flag(self, key: str) -> dict[str, Any] | None:
        async with self.transaction() as session:
            return await self.get_flag_in(session, key)

    async def get_flag_in(self, session: AsyncSession, key: str) -> dict[str, Any] | None:
        row = await session.get(ControllerState, key)
        return dict(row.value) if row else None

    async def set_flag(self, key: str, value: dict[str, Any], *, audit_kind: str, actor: str) -> None:
        async with self.transaction() as session:
            row = await session.get(ControllerState, key)
            if row is None:
                session.add(ControllerState(key=key, value=_jsonable(value), updated_at=self._clock()))
            else:
                row.value = _jsonable(value)
                row.updated_at = self._clock()
            await self.audit(session, audit_kind, actor=actor, data=value)

    # -- the Slack message per remediation (bot mode) ---------------------------------------------

    async def get_slack_message(self, rem_id: str) -> tuple[str, str] | None:
        """(channel id, ts) of the Slack message about `rem_id`, if one was posted."""
        async with self.transaction() as session:
            row = await session.get(SlackMessage, rem_id)
            return (row.channel, row.ts) if row else None

    async def put_slack_message(self, rem_id: str, channel: str, ts: str) -> None:
        """Remember (or move) the Slack message about `rem_id`."""
        async with self.transaction() as session:
            row = await session.get(SlackMessage, rem_id)
            now = self._clock()
            if row is None:
                session.add(SlackMessage(remediation_id=rem_id, channel=channel, ts=ts, created_at=now, updated_at=now))
            else:
                row.channel, row.ts, row.updated_at = channel, ts, now

    # -- reads for the API and the worker ---------------------------------------------------------

    async def get(self, rem_id: str) -> Remediation | None:
        async with self.transaction() as session:
            return await session.get(Remediation, rem_id)

    async def steps(self, rem_id: str) -> list[StepRow]:
        async with self.transaction() as session:
            rows = await session.scalars(
                select(StepRow).where(StepRow.remediation_id == rem_id).order_by(StepRow.phase.desc(), StepRow.idx)
            )
            return list(rows.all())

    async def list_remediations(
        self, *, state: str | None = None, node: str | None = None, limit: int = 100, offset: int = 0,
        id_prefix: str | None = None, leave_out: Collection[str] = (),
    ) -> list[Remediation]:
        """Remediations newest first, without the columns named in `leave_out` (of LARGE_COLUMNS): touching
        one of those on a returned row raises instead of loading it."""
        async with self.transaction() as session:
            query = select(Remediation)
            if leave_out:
                query = query.options(*(defer(getattr(Remediation, c), raiseload=True) for c in leave_out))
            if state:
                query = query.where(Remediation.state == state)
            if node:
                query = query.where(Remediation.node == node)
            if id_prefix:
                query = query.where(Remediation.id.startswith(id_prefix, autoescape=True))
            query = query.order_by(Remediation.created_at.desc(), Remediation.id).limit(limit).offset(offset)
            return list((await session.scalars(query)).all())

    async def remediations_since(
        self, since: datetime | None, *, after: tuple[datetime, str] | None = None, limit: int = 1000
    ) -> list[Remediation]:
        """One page of remediations created at or after `since`, oldest first by (created_at, id).

        Pass the (created_at, id) of the last row of a page as `after` to read the next one.
        """
        async with self.transaction() as session:
            query = select(Remediation)
            if since is not None:
                query = query.where(Remediation.created_at >= since)
            if after is not None:
                at, rem_id = after
                query = query.where(
                    or_(Remediation.created_at > at, (Remediation.created_at == at) & (Remediation.id > rem_id))
                )
            query = query.order_by(Remediation.created_at, Remediation.id).limit(limit)
            return list((await session.scalars(query)).all())

    async def list_audit(
        self, *, remediation_id: str | None = None, after_id: int = 0, limit: int = 1000
    ) -> list[AuditEvent]:
        async with self.transaction() as session:
            query = select(AuditEvent).where(AuditEvent.id > after_id)
            if remediation_id:
                query = query.where(AuditEvent.remediation_id == remediation_id)
            query = query.order_by(AuditEvent.id).limit(limit)
            return list((await session.scalars(query)).all())

    async def list_alerts(self, *, since: datetime | None = None, limit: int = 100000) -> list[AlertRow]:
        async with self.transaction() as session:
            query = select(AlertRow)
            if since is not None:
                query = query.where(AlertRow.received_at >= since)
            return list((await session.scalars(query.order_by(AlertRow.id).limit(limit))).all())

    async def recent_alerts(
        self, *, state: str | None = None, status: str | None = None, node: str | None = None,
        node_labels: Sequence[str] = (), limit: int = 100,
    ) -> list[AlertRow]:
        """Stored alerts, newest first; `node` matches any of `node_labels` (the node label precedence)."""
        async with self.transaction() as session:
            query = select(AlertRow)
            if state:
                query = query.where(AlertRow.state == state)
            if status:
                query = query.where(AlertRow.status == status)
            if node:
                matches = [AlertRow.labels[key].as_string() == node for key in node_labels]
                query = query.where(or_(*matches) if matches else false())
            query = query.order_by(AlertRow.id.desc()).limit(limit)
            return list((await session.scalars(query)).all())

    async def list_approvals(
        self, *, decision: str | None = None, pending: bool = False, node: str | None = None,
        remediation_id: str | None = None, limit: int = 100,
    ) -> list[tuple[Approval, Remediation]]:
        """Approval requests with their remediation, newest first; `pending`: not decided yet."""
        async with self.transaction() as session:
            query = select(Approval, Remediation).join(Remediation, Remediation.id == Approval.remediation_id)
            if pending:
                query = query.where(Approval.decision.is_(None))
            elif decision:
                query = query.where(Approval.decision == decision)
            if node:
                query = query.where(Remediation.node == node)
            if remediation_id:
                query = query.where(Approval.remediation_id == remediation_id)
            query = query.order_by(Approval.id.desc()).limit(limit)
            return [(a, r) for a, r in (await session.execute(query)).all()]

    async def count_by_state(self) -> dict[str, int]:
        async with self.transaction() as session:
            rows = await session.execute(select(Remediation.state, func.count()).group_by(Remediation.state))
            return {str(state): int(n) for state, n in rows.all()}

    async def oldest_active(self) -> dict[str, datetime]:
        """created_at of the oldest remediation in each active state that has one."""
        async with self.transaction() as session:
            rows = await session.execute(
                select(Remediation.state, func.min(Remediation.created_at))
                .where(Remediation.state.in_(ACTIVE_STATES))
                .group_by(Remediation.state)
            )
            return {
                str(state): at if at.tzinfo is not None else at.replace(tzinfo=UTC)
                for state, at in rows.all()
                if at is not None
            }

    async def quarantined_nodes(self, session: AsyncSession) -> set[str]:
        rows = await session.scalars(
            select(Remediation.node).where(Remediation.quarantined == true(), Remediation.node.is_not(None)).distinct()
        )
        return {n for n in rows.all() if n}

    async def held_for_room_before(
        self, session: AsyncSession, rem_id: str, created_at: datetime, node: str | None, reason_prefix: str
    ) -> set[str]:
        """Nodes of the held remediations whose reason starts with `reason_prefix` (the circuit breaker's) and
        that were created before this one: the queue ahead of it for quarantine room. `node` is left out."""
        rows = await session.scalars(
            select(Remediation.node).where(
                Remediation.state == "held",
                Remediation.state_reason.startswith(reason_prefix, autoescape=True),
                Remediation.node.is_not(None),
                or_(Remediation.created_at < created_at,
                    (Remediation.created_at == created_at) & (Remediation.id < rem_id)),
            ).distinct()
        )
        return {n for n in rows.all() if n and n != node}

    async def recent_quarantine_starts(self, session: AsyncSession, since: datetime) -> int:
        count = await session.scalar(
            select(func.count()).where(AuditEvent.kind == "quarantine.started", AuditEvent.ts >= since)
        )
        return int(count or 0)

    async def flap_count(self, session: AsyncSession, fingerprint: str, since: datetime) -> int:
        """How often this alert resolved within the window (first deliveries only)."""
        count = await session.scalar(
            select(func.count()).where(
                AlertRow.fingerprint == fingerprint, AlertRow.status == "resolved", AlertRow.state != "repeat",
                AlertRow.received_at >= since,
            )
        )
        return int(count or 0)

    async def node_remediations_since(self, session: AsyncSession, node: str, since: datetime, exclude: str) -> int:
        """Remediations on this node that started acting (quarantine or steps) within the window."""
        count = await session.scalar(
            select(func.count(func.distinct(Remediation.id))).where(
                Remediation.node == node, Remediation.created_at >= since, Remediation.id != exclude,
                Remediation.id.in_(select(StepRow.remediation_id).where(StepRow.phase == "forward",
                                                                         StepRow.status == "succeeded")),
            )
        )
        return int(count or 0)

    async def recent_alerts_for_gpu(
        self, node: str, gpu: str, alertname: str, since: datetime,
        node_labels: Sequence[str] = ("node", "kubernetes_node", "Hostname", "hostname"),
    ) -> list[AlertRow]:
        """First deliveries of firing `alertname` alerts on one GPU within the window (the node named by any
        of `node_labels`, the controller's NODE_LABEL_PRECEDENCE).

        The node and GPU labels are compared in SQL: loading every recent alert of the name and filtering here
        made a storm quadratic (10,000 Xid alerts: each loaded all the others).
        """
        labels = AlertRow.labels
        async with self.transaction() as session:
            rows = await session.scalars(
                select(AlertRow).where(
                    AlertRow.alertname == alertname, AlertRow.status == "firing", AlertRow.state != "repeat",
                    AlertRow.received_at >= since,
                    or_(*(labels[key].as_string() == node for key in node_labels)),
                    or_(*(labels[key].as_string() == gpu for key in ("UUID", "gpu"))),
                )
            )
            return list(rows.all())

    async def node_history(self, node: str, *, since: datetime | None = None, limit: int = 200) -> list[Remediation]:
        """Remediations on one node, newest first (the escalation ladder and RMA summaries read them)."""
        async with self.transaction() as session:
            query = select(Remediation).where(Remediation.node == node)
            if since is not None:
                query = query.where(Remediation.created_at >= since)
            rows = await session.scalars(query.order_by(Remediation.created_at.desc()).limit(limit))
            return list(rows.all())

    async def create_escalation(self, source: Remediation, new: NewRemediation, reason: str) -> tuple[str, str]:
        """Start the next rung for `source` (same alert), or link to that rung's active remediation.

        Returns (`started` or `linked`, remediation id); audited on both remediations.
        """
        active_key = f"{new.target_key}|{new.playbook}"
        for _ in range(3):
            try:
                async with self.transaction() as session:
                    return await self._create_escalation(session, source, new, reason, active_key)
            except IntegrityError:
                continue  # another replica started the same rung a moment ago: link to it
        raise StoreUnavailable("could not record an escalation after concurrent starts")

    async def _create_escalation(
        self, session: AsyncSession, source: Remediation, new: NewRemediation, reason: str, active_key: str
    ) -> tuple[str, str]:
        now = self._clock()
        active = await session.scalar(select(Remediation).where(Remediation.active_key == active_key))
        if active is not None:
            await self.audit(session, "remediation.escalated", remediation_id=source.id,
                             data={"to": active.id, "playbook": new.playbook, "reason": reason, "linked": True})
            return "linked", active.id
        rem_id = str(uuid.uuid4())
        session.add(
            Remediation(
                id=rem_id, created_at=now, updated_at=now, finished_at=None, state="pending", state_reason=reason,
                rule=new.rule, playbook=new.playbook, definitions_version=new.definitions_version,
                target_kind=new.target_kind, target_key=new.target_key, node=new.node, gpu_uuid=new.gpu_uuid,
                gpu_index=new.gpu_index, namespace=new.namespace, pod=new.pod, alert_id=source.alert_id,
                alert_fingerprint=source.alert_fingerprint, alertname=source.alertname,
                alert_labels=dict(source.alert_labels), alert_annotations=dict(source.alert_annotations),
                alert_resolved=False, params=_jsonable(new.params), plan=_jsonable(new.plan), context={},
                phase="forward", current_step=0, active_key=active_key, quarantined=False, linked_alerts=0,
                next_run_at=now,
            )
        )
        await session.flush()
        await self.audit(session, "remediation.escalated", remediation_id=source.id,
                         data={"to": rem_id, "playbook": new.playbook, "reason": reason, "linked": False})
        await self.audit(
            session, "remediation.created", remediation_id=rem_id,
            data={"rule": new.rule, "playbook": new.playbook, "target": new.target_key, "alert_id": source.alert_id,
                  "alertname": source.alertname, "definitions_version": new.definitions_version,
                  "escalated_from": source.id, "reason": reason},
        )
        return "started", rem_id

    async def note_return_waiting(self, rem_id: str, owner: str, reason: str) -> None:
        """Record why an undo waits at its return gate (`revert.waiting`), once per new reason."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            rem.state_reason = reason
            rem.updated_at = self._clock()
            await self.audit(session, "revert.waiting", remediation_id=rem_id,
                             data={"reason": reason, "step": rem.current_step})

    async def wake_held(self) -> int:
        """Make every held remediation, and every undo waiting out a pause, due now (after resume, or when
        quarantine room frees). A crash backoff (`not_before`) still applies."""
        async with self.transaction() as session:
            result = await session.execute(
                update(Remediation)
                .where(Remediation.state.in_(("held", "reverting")))
                .values(next_run_at=self._clock())
            )
            return int(result.rowcount)  # type: ignore[attr-defined]

    async def held(self) -> list[Remediation]:
        return await self.list_remediations(state="held", limit=1000, leave_out=LARGE_COLUMNS)

    async def due_approvals(self, now: datetime) -> list[str]:
        async with self.transaction() as session:
            rows = await session.scalars(
                select(Remediation.id).where(
                    Remediation.state == "awaiting_approval", Remediation.approval_expires_at.is_not(None),
                    Remediation.approval_expires_at < now,
                )
            )
            return list(rows.all())


    # -- approvals (the token itself is never stored; only its SHA-256) ---------------------------

    async def open_approval(
        self, rem_id: str, owner: str, *, step_index: int, step_name: str, token_hash: str,
        expires_at: datetime, requested_to: list[str], reason: str,
    ) -> Approval:
        """Stop the remediation in awaiting_approval and record the request, in one transaction."""
        now = self._clock()
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            await session.execute(
                update(Approval)
                .where(Approval.remediation_id == rem_id, Approval.decision.is_(None))
                .values(decision="superseded", decided_by="controller", decided_at=now, decision_source="controller")
            )
            await self._transition(
                session, rem, "await_approval", reason=reason,
                data={"step": step_name, "index": step_index, "expires_at": expires_at.isoformat()},
            )
            rem.approval_step = step_index
            rem.approval_expires_at = expires_at
            rem.approval_token_hash = token_hash
            rem.decision = None
            rem.decided_by = None
            rem.decided_at = None
            approval = Approval(
                remediation_id=rem_id, step_index=step_index, step_name=step_name, token_hash=token_hash,
                created_at=now, expires_at=expires_at, requested_to=list(requested_to), decision=None,
                decided_by=None, decided_at=None, decision_source=None,
            )
            session.add(approval)
            await session.flush()
            await self.audit(
                session, "approval.requested", remediation_id=rem_id,
                data={"approval_id": approval.id, "step": step_name, "index": step_index,
                      "expires_at": expires_at.isoformat(), "requested_to": list(requested_to)},
            )
            return approval

    async def approval_by_token_hash(self, token_hash: str) -> tuple[Approval, Remediation] | None:
        async with self.transaction() as session:
            approval = await session.scalar(select(Approval).where(Approval.token_hash == token_hash))
            if approval is None:
                return None
            rem = await session.get(Remediation, approval.remediation_id)
            return (approval, rem) if rem is not None else None

    async def approvals_of(self, rem_id: str) -> list[Approval]:
        """Every approval request of a remediation, oldest first."""
        async with self.transaction() as session:
            rows = await session.scalars(
                select(Approval).where(Approval.remediation_id == rem_id).order_by(Approval.id)
            )
            return list(rows.all())

    async def get_approval(self, approval_id: int) -> Approval | None:
        async with self.transaction() as session:
            return await session.get(Approval, approval_id)

    async def decide_approval(
        self, approval_id: int, *, decision: str, actor: str, source: str, comment: str | None = None,
    ) -> bool:
        """Record a human decision exactly once (compare-and-set) with its transition and audit event.

        Returns False, changing nothing, when the request was already decided, has expired, or the
        remediation is no longer waiting for this step.
        """
        if decision not in ("approved", "rejected"):
            raise ValueError(f"decision must be approved or rejected, not {decision!r}")
        now = self._clock()
        try:
            async with self.transaction() as session:
                claimed = await session.execute(
                    update(Approval)
                    .where(Approval.id == approval_id, Approval.decision.is_(None), Approval.expires_at > now)
                    .values(decision=decision, decided_by=actor, decided_at=now, decision_source=source)
                )
                if not claimed.rowcount:  # type: ignore[attr-defined]
                    return False
                approval = await session.get(Approval, approval_id)
                assert approval is not None
                moved = await session.execute(
                    update(Remediation)
                    .where(
                        Remediation.id == approval.remediation_id, Remediation.state == "awaiting_approval",
                        Remediation.decision.is_(None), Remediation.approval_step == approval.step_index,
                    )
                    .values(decision=decision, decided_by=actor, decided_at=now)
                )
                if not moved.rowcount:  # type: ignore[attr-defined]
                    raise _NotDecided
                rem = await session.get(Remediation, approval.remediation_id, populate_existing=True)
                assert rem is not None
                event = "approve" if decision == "approved" else "reject"
                await self._transition(
                    session, rem, event, actor=actor,
                    reason=f"{decision} by {actor}" + (f": {comment}" if comment else ""),
                    data={"approval_id": approval_id, "step": approval.step_name,
                          "index": approval.step_index, "decided_by": actor, "source": source, "comment": comment},
                )
                if decision == "approved":
                    rem.next_run_at = now
                return True
        except _NotDecided:
            return False

    async def expire_approval(self, rem_id: str, *, proceed: bool) -> str | None:
        """Close an overdue request: the remediation expires, or with `proceed` runs the step as approved.

        Compare-and-set like `decide_approval`, so a human decision racing the expiry wins or loses whole.
        Returns the new state, or None when there was nothing (any more) to expire.
        """
        now = self._clock()
        async with self.transaction() as session:
            moved = await session.execute(
                update(Remediation)
                .where(
                    Remediation.id == rem_id, Remediation.state == "awaiting_approval",
                    Remediation.decision.is_(None), Remediation.approval_expires_at < now,
                )
                .values(
                    decision="approved" if proceed else "expired", decided_by="controller", decided_at=now
                )
            )
            if not moved.rowcount:  # type: ignore[attr-defined]
                return None
            rem = await session.get(Remediation, rem_id, populate_existing=True)
            assert rem is not None
            approvals = list((await session.scalars(
                select(Approval).where(Approval.remediation_id == rem_id, Approval.decision.is_(None))
            )).all())
            for approval in approvals:
                approval.decision = "expired"
                approval.decided_by = "controller"
                approval.decided_at = now
                approval.decision_source = "expiry"
            step = approvals[-1].step_name if approvals else None
            await self.audit(
                session, "approval.expired", remediation_id=rem_id,
                data={"step": step, "index": rem.approval_step,
                      "on_expiry": "continue" if proceed else "abort"},
            )
            if proceed:
                await self._transition(
                    session, rem, "approve", reason="approval not given in time; the playbook says continue",
                    data={"step": step, "index": rem.approval_step, "on_expiry": "continue"},
                )
                rem.next_run_at = now
            else:
                await self._transition(session, rem, "expire", reason="approval not given in time",
                                       data={"step": step, "index": rem.approval_step})
            return rem.state

    async def record_audit(
        self, kind: str, *, remediation_id: str | None = None, actor: str = "controller",
        data: dict[str, Any] | None = None,
    ) -> None:
        """Append one audit event on its own (for facts that change no row, e.g. a failed notification)."""
        async with self.transaction() as session:
            await self.audit(session, kind, remediation_id=remediation_id, actor=actor, data=data)

    # -- definition versions ----------------------------------------------------------------------

    async def save_definition_version(self, version: str, sources: dict[str, str]) -> bool:
        """Store the source text of a definition set once; True when this call stored it."""
        try:
            async with self.transaction() as session:
                if await session.get(DefinitionVersion, version) is not None:
                    return False
                session.add(DefinitionVersion(version=version, created_at=self._clock(), sources=dict(sources)))
                await session.flush()
                return True
        except IntegrityError:
            return False  # another replica stored the same version a moment ago

    async def get_definition_version(self, version: str) -> DefinitionVersion | None:
        async with self.transaction() as session:
            return await session.get(DefinitionVersion, version)

    async def list_definition_versions(self, limit: int = 100) -> list[tuple[str, datetime]]:
        """(version, first stored at), newest first."""
        async with self.transaction() as session:
            rows = await session.execute(
                select(DefinitionVersion.version, DefinitionVersion.created_at)
                .order_by(DefinitionVersion.created_at.desc())
                .limit(limit)
            )
            return [(str(v), _aware(ts) or ts) for v, ts in rows.all()]

    async def get_remediations(self, ids: list[str]) -> dict[str, Remediation]:
        """Remediations by id (for replay); unknown ids are left out."""
        found: dict[str, Remediation] = {}
        async with self.transaction() as session:
            for start in range(0, len(ids), 500):
                rows = await session.scalars(select(Remediation).where(Remediation.id.in_(ids[start:start + 500])))
                found.update({rem.id: rem for rem in rows.all()})
        return found

    async def steps_for(self, rem_ids: list[str]) -> dict[str, list[StepRow]]:
        """Step rows of many remediations at once, in the order `steps` gives them."""
        found: dict[str, list[StepRow]] = {rem_id: [] for rem_id in rem_ids}
        async with self.transaction() as session:
            for start in range(0, len(rem_ids), 500):
                rows = await session.scalars(
                    select(StepRow)
                    .where(StepRow.remediation_id.in_(rem_ids[start:start + 500]))
                    .order_by(StepRow.remediation_id, StepRow.phase.desc(), StepRow.idx)
                )
                for row in rows.all():
                    found[row.remediation_id].append(row)
        return found

    # -- reads for the fleet view and "why did nothing happen?" -----------------------------------

    async def get_alert(self, alert_id: int) -> AlertRow | None:
        async with self.transaction() as session:
            return await session.get(AlertRow, alert_id)

    async def processed_alerts(
        self, *, outcomes: Sequence[str], since: datetime | None = None, limit: int = 500
    ) -> list[AlertRow]:
        """Processed alerts (first deliveries) with one of these outcomes, newest first."""
        async with self.transaction() as session:
            query = select(AlertRow).where(AlertRow.state == "done", AlertRow.outcome.in_(list(outcomes)))
            if since is not None:
                query = query.where(AlertRow.received_at >= since)
            query = query.order_by(AlertRow.id.desc()).limit(limit)
            return list((await session.scalars(query)).all())

    async def fleet_remediations(self, since: datetime, limit: int = 2000) -> list[Remediation]:
        """Remediations that matter to the fleet now: quarantining, active, or created/finished since `since`."""
        async with self.transaction() as session:
            query = (
                select(Remediation)
                .where(or_(
                    Remediation.quarantined.is_(True),
                    Remediation.state.in_(sorted(ACTIVE_STATES)),
                    Remediation.created_at >= since,
                    Remediation.finished_at >= since,
                ))
                .order_by(Remediation.created_at.desc(), Remediation.id)
                .limit(limit)
            )
            return list((await session.scalars(query)).all())

    async def steps_with_actions(self, actions: Sequence[str], limit: int = 5000) -> list[StepRow]:
        """The latest step rows of these actions, oldest first (the fleet view reads power caps in force)."""
        async with self.transaction() as session:
            rows = await session.scalars(
                select(StepRow).where(StepRow.action.in_(list(actions))).order_by(StepRow.id.desc()).limit(limit)
            )
            return list(reversed(rows.all()))


class _NotDecided(Exception):
    """Rolls back a half-made decision whose second compare-and-set found nothing to change."""


def _with_repeats(stored: list[StoredBatch], extra: dict[str, int]) -> list[StoredBatch]:
    """`stored` with each batch's repeat count raised by the first deliveries it lost to another writer."""
    return [StoredBatch(s.batch_id, s.alerts, s.repeats + extra.get(s.batch_id, 0)) for s in stored]


def _intake_rows(
    payloads: Sequence[AlertmanagerPayload], keyed: list[list[str]], existing: dict[str, int], now: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[StoredBatch]]:
    """Rows for alert_batches and alerts, marking repeats (seen before, or earlier in this group)."""
    seen: set[str] = set()
    repeats: list[list[bool]] = []
    for keys in keyed:
        flags = []
        for key in keys:
            flags.append(key in existing or key in seen)
            seen.add(key)
        repeats.append(flags)
    ids = [uuid.uuid4().hex for _ in payloads]
    batch_rows = [
        {
            "id": batch_id, "received_at": now, "receiver": p.receiver, "status": p.status,
            "group_key": p.group_key, "external_url": p.external_url,
            "truncated_alerts": p.truncated_alerts, "alert_count": len(p.alerts), "repeat_count": sum(flags),
        }
        for p, flags, batch_id in zip(payloads, repeats, ids, strict=True)
    ]
    alert_rows = [
        {
            "batch_id": batch_id, "fingerprint": a.fingerprint, "alertname": a.alertname,
            "status": a.status, "starts_at": a.starts_at, "ends_at": a.ends_at, "labels": dict(a.labels),
            "annotations": dict(a.annotations), "generator_url": a.generator_url, "received_at": now,
            "dedup_key": None if repeat else key, "repeat_of": existing.get(key),
            "state": "repeat" if repeat else "new",
        }
        for p, keys, flags, batch_id in zip(payloads, keyed, repeats, ids, strict=True)
        for a, key, repeat in zip(p.alerts, keys, flags, strict=True)
    ]
    stored = [
        StoredBatch(batch_id, len(p.alerts), sum(flags))
        for p, flags, batch_id in zip(payloads, repeats, ids, strict=True)
    ]
    return batch_rows, alert_rows, stored

"""Remediations and their moves: start or link for a firing alert, resolve, transitions, leases, crashes,
admission, escalations."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from remediator.domain.guardrails import Verdict
from remediator.domain.json_values import JsonObject, jsonable
from remediator.domain.plan_snapshot import stored_playbook_field
from remediator.domain.returns import return_reason
from remediator.domain.states import TRANSITIONS, Event, State, allowed_actions
from remediator.errors import IllegalTransition, LeaseLost, StoreUnavailable
from remediator.retrying import WAITING_PREFIX, on_conflict
from remediator.store.admission import Admission, SessionReads
from remediator.store.flag_store import PAUSE_FLAG
from remediator.store.models import (
    AlertRow,
    Remediation,
)
from remediator.store.read_store import ReadStore, SteadyCounts, flag_value, steady_counts
from remediator.store.redelivery import ended_without_running
from remediator.store.step_store import begin_step_in, steps_begun
from remediator.store.storm_store import StormStore
from remediator.store.transactions import _ADMIT_LOCK, BREAKER_MEMO, BreakerMemo, NewRemediation

__all__ = ["Admission", "Admitted", "RemediationStore"]

Admitted = tuple[Remediation, Verdict, bool]  # (the remediation as committed, the verdict, changed)


class RemediationStore(ReadStore, StormStore):
    """Remediations and their moves (a mixin of `Repository`); an admission reads through the read and storm
    mixins in its own transaction (store/admission.py)."""

    async def record_firing(self, alert: AlertRow, new: NewRemediation) -> tuple[str, str]:
        """Start a remediation for a firing alert, or link it to the active one, or respect the cooldown.

        Returns (outcome, remediation_id or ""). Outcome is `started`, `linked` or `cooldown`.
        """
        active_key = active_key_of(new)
        try:
            async for attempt in on_conflict(IntegrityError, attempts=3):
                with attempt:  # another replica inserted the same active key a moment ago: link to it
                    async with self.transaction() as session:
                        return await self._record_firing(session, alert, new, active_key)
        except IntegrityError:
            raise StoreUnavailable("could not record alert after concurrent starts") from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _record_firing(
        self, session: AsyncSession, alert: AlertRow, new: NewRemediation, active_key: str
    ) -> tuple[str, str]:
        now = self.clock()
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
                    ~ended_without_running(),  # the cooldown is for remediations that ran (decision_store.py)
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
        session.add(new_row_for(rem_id, alert, new, active_key, now))
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
                on_resolved = str(stored_playbook_field(rem.plan, "on_resolved") or "keep")
                if rem.state in (State.PENDING, State.HELD, State.AWAITING_APPROVAL):
                    await self._transition(session, rem, Event.CANCEL, reason="alert resolved", actor="alertmanager")
                    results.append((rem.id, "cancelled"))
                    if on_resolved == "revert" and await self._has_done_steps(session, rem.id):
                        await self._start_revert(session, rem, "alert resolved")
                        results[-1] = (rem.id, "cancelled+reverting")
                elif rem.state == State.RUNNING:
                    results.append((rem.id, "marked"))
                elif rem.state in (State.SUCCEEDED, State.PLANNED, State.FAILED) and on_resolved == "revert":
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

    async def transition(
        self, rem_id: str, event: str, *, reason: str | None = None, actor: str = "controller",
        owner: str | None = None, data: Mapping[str, object] | None = None,
        changes: Mapping[str, object] | None = None,
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
            await self._transition(session, rem, Event.REVERT, reason=reason, actor=actor)
            rem.return_request = None  # a plain undo ends `reverted`, whatever an earlier return asked
            rem.current_step = 0
            rem.next_run_at = self.clock()
            rem.crashes, rem.not_before = 0, None  # the undo gets its own crash budget
            return rem

    async def start_return(
        self, rem_id: str, *, actor: str, reason: str, skip: Sequence[str], from_state: str | None = None,
    ) -> Remediation:
        """A person's forced return to service: move the remediation (event `return`) to `reverting` with the
        request on the row (`return_request`: actor, reason, skip, at), in one transaction with its audit
        event. An undo already under way keeps its place (what it undid stays undone); any other state starts
        the undo from the first gate step. Open approval requests are superseded (`_transition`).

        `from_state`: the state the caller checked the remediation in; IllegalTransition (naming the state it is
        in now) when it moved since, so the caller's check (does it still hold anything?) still stands."""
        now = self.clock()
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, None)
            if from_state is not None and rem.state != from_state:
                raise IllegalTransition(rem.state, Event.RETURN, allowed_actions(rem.state))
            undoing = rem.state == State.REVERTING
            skipped = sorted(set(skip))
            request: JsonObject = {"actor": actor, "reason": reason, "skip": [*skipped], "at": now.isoformat(),
                                   "from": rem.state}
            await self._transition(
                session, rem, Event.RETURN, actor=actor,
                reason=return_reason(actor, reason, skipped),
                data={"return": {k: v for k, v in request.items() if k != "at"}},
            )
            rem.return_request = request
            if not undoing:
                rem.current_step = 0
            rem.next_run_at = now
            rem.crashes, rem.not_before = 0, None  # the return gets its own crash budget
            return rem

    async def claim_remediations(self, owner: str, limit: int, lease: timedelta) -> list[str]:
        """Claim runnable remediations whose lease is free or expired (a dead replica's work resumes)."""
        return [rem.id for rem in await self.claim_remediation_rows(owner, limit, lease)]

    async def claim_remediation_rows(self, owner: str, limit: int, lease: timedelta) -> list[Remediation]:
        """`claim_remediations`, returning the claimed rows as the claiming transaction left them (leased to
        `owner`), so the worker starts driving them without reading each one again."""
        now = self.clock()
        runnable = (
            Remediation.state.in_(("pending", "running", "reverting", "held")),
            or_(Remediation.lease_expires.is_(None), Remediation.lease_expires < now),
            or_(Remediation.next_run_at.is_(None), Remediation.next_run_at <= now),
            or_(Remediation.not_before.is_(None), Remediation.not_before <= now),  # crash backoff
        )
        async with self.reading() as session:  # an idle poll takes no write lock (see claim_alerts)
            if await session.scalar(select(Remediation.id).where(*runnable).limit(1)) is None:
                return []
        async with self.transaction() as session:
            query = (
                select(Remediation)
                .where(*runnable)
                # New work first (admission quarantines a node; an undo frees breaker room), then the next
                # step of running ones, then those the breaker holds; oldest first within each.
                .order_by(
                    case((Remediation.state == State.HELD, 2), (Remediation.state == State.RUNNING, 1), else_=0),
                    Remediation.created_at,
                )
                .limit(limit)
            )
            if self.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            rows = (await session.scalars(query)).all()
            for rem in rows:
                rem.lease_owner = owner
                rem.lease_expires = now + lease
            return list(rows)

    async def renew_lease(self, rem_id: str, owner: str, lease: timedelta) -> bool:
        async with self.transaction() as session:
            result = await session.execute(
                update(Remediation)
                .where(Remediation.id == rem_id, Remediation.lease_owner == owner)
                .values(lease_expires=self.clock() + lease)
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]

    async def release_lease(self, rem_id: str, owner: str, *, next_run_in: timedelta | None = None) -> None:
        async with self.transaction() as session:
            values: dict[str, Any] = {"lease_owner": None, "lease_expires": None}
            if next_run_in is not None:
                values["next_run_at"] = self.clock() + next_run_in
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
        now = self.clock()
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            rem.crashes = (rem.crashes or 0) + 1
            rem.error = error
            rem.updated_at = now
            ends = rem.crashes >= max_crashes and (rem.state, Event.CRASH) in TRANSITIONS
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
                    session, rem, Event.CRASH, reason=f"crashed {rem.crashes} times in a row; last error: {error}",
                    data={"crashes": rem.crashes, "error": error},
                )
            rem.not_before = not_before
            return rem.crashes, not_before

    async def note_revert_pause(self, rem_id: str, owner: str, *, paused: bool, reason: str) -> None:
        """Record that an undo stopped for the pause switch (`revert.paused`) or goes on (`revert.resumed`)."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            rem.state_reason = reason
            rem.updated_at = self.clock()
            await self.audit(session, "revert.paused" if paused else "revert.resumed", remediation_id=rem_id,
                             data={"reason": reason, "step": rem.current_step})

    async def _set_context(self, session: AsyncSession, rem: Remediation, context: dict[str, Any]) -> None:
        rem.context = jsonable(context)
        await self.audit(session, "context.gathered", remediation_id=rem.id,
                         data={"pods": len(context.get("pods", [])), "source": context.get("pod_source")})

    async def admit_many(self, requests: Sequence[Admission]) -> list[Admitted | BaseException]:
        """Guardrail decisions and the quarantines they admit, serialized across replicas, several at once.

        Each request is an `Admission` (store/admission.py): `facts(reads, counts)` reads what the decision
        needs in this transaction (`reads`: the breaker's counts and the storm window, no session) and
        `verdict(facts)` is the guardrails' verdict on them (domain/guardrails.py); each result is (the
        remediation as committed, verdict, changed), `changed` False when a held remediation is still held for
        the same reason, or the exception of that request alone (its lease lost, the remediation gone). A
        `context` gathered for an admission is stored in the same transaction, audited as `context.gathered`,
        and so is a `first_step` that an admitted new remediation begins (its step row and `step.started`).

        The admission lock orders admissions across replicas, so only what other admissions change is read
        under it: the remediations' own rows (locked first, in one statement), their contexts and the `steady`
        queries of the whole batch (facts about each remediation alone, in one statement:
        `read_store.steady_counts`) come before it; the pause flag is read under it, once a batch. Under the
        lock the requests are decided oldest first, each seeing the ones before it (the quarantines they
        started, the remediations they left held), as if admitted one after another. One lock and one commit
        for the batch: in a storm, admissions one at a time queued on this lock across replicas (tens of
        transactions waiting), each paying its round trips while holding it.
        """
        results: list[Admitted | BaseException | None] = [None] * len(requests)
        async with self.transaction() as session:
            rems: dict[int, Remediation] = {}
            found = await self._rows_for_update(session, [request.rem_id for request in requests])
            for i, request in enumerate(requests):
                rem = found.get(request.rem_id)
                if rem is None or rem.lease_owner != request.owner:
                    results[i] = KeyError(request.rem_id) if rem is None else LeaseLost(request.rem_id)
                    continue
                if request.context is not None:
                    await self._set_context(session, rem, request.context)
                rems[i] = rem
            asked = [i for i in rems if requests[i].steady is not None]
            answers = await steady_counts(session, [q for i in asked if (q := requests[i].steady) is not None])
            steady: dict[int, SteadyCounts] = dict(zip(asked, answers, strict=True))
            # The first steps' rows for the whole batch in one statement, before the lock: normally there are
            # none (a step an admission begins commits with the remediation's new state), but a row that does
            # exist is resumed, as `begin_step` would.
            begun = await steps_begun(session, [
                (rem.id, first.phase, first.idx) for i, rem in rems.items()
                if rem.state == State.PENDING and (first := requests[i].first_step) is not None
            ])
            if rems:
                await self._lock(session, _ADMIT_LOCK)
            if steady:  # the kill switch as it is now, under the lock: what an admitted first step relies on
                pause = await flag_value(session, PAUSE_FLAG)
                steady = {i: replace(counts, pause=pause) for i, counts in steady.items()}
            # The breaker's counts are read once under the lock and kept current here (the batch's own
            # quarantines added), not read again for every request of the batch.
            memo = BreakerMemo()
            session.info[BREAKER_MEMO] = memo
            reads = SessionReads(self, session)
            for i in sorted(rems, key=lambda k: (rems[k].created_at, rems[k].id)):
                rem, request = rems[i], requests[i]
                verdict = request.verdict(await request.facts(reads, steady.get(i)))
                was_pending = rem.state == State.PENDING
                results[i] = await self._apply_verdict(session, rem, verdict)
                memo.decided(rem)
                if verdict.allow and was_pending and request.first_step is not None:
                    await begin_step_in(self, session, rem.id, request.first_step, begun=begun)
                if verdict.allow and verdict.quarantines:
                    memo.started(rem.node)
                await session.flush()  # the next request's facts see this one's state
            session.info.pop(BREAKER_MEMO, None)
        return [r if r is not None else KeyError("not decided") for r in results]

    async def _rows_for_update(self, session: AsyncSession, rem_ids: Sequence[str]) -> dict[str, Remediation]:
        """The rows of these remediations (locked on PostgreSQL, in id order: batches on other replicas lock
        theirs in the same order), by id; one statement for an admission batch."""
        wanted = sorted(set(rem_ids))
        query = select(Remediation).where(Remediation.id.in_(wanted)).order_by(Remediation.id)
        if self.dialect == "postgresql":
            query = query.with_for_update()
        return {rem.id: rem for rem in (await session.scalars(query)).all()}

    async def _apply_verdict(self, session: AsyncSession, rem: Remediation, verdict: Verdict) -> Admitted:
        if verdict.allow:
            if rem.state == State.HELD:
                await self._transition(session, rem, Event.RELEASE, reason="guardrails allow")
            await self._transition(session, rem, Event.START, reason=verdict.reason)
            rem.quarantined = bool(verdict.quarantines)
            if rem.quarantined:
                await self.audit(session, "quarantine.started", remediation_id=rem.id, data={"node": rem.node})
            return rem, verdict, True
        if rem.state == State.HELD and rem.state_reason == verdict.reason:
            return rem, verdict, False
        await self._transition(session, rem, Event.HOLD, reason=verdict.reason, data={"guardrail": verdict.name})
        return rem, verdict, True

    async def get(self, rem_id: str) -> Remediation | None:
        async with self.transaction() as session:
            return await session.get(Remediation, rem_id)

    async def create_escalation(self, source: Remediation, new: NewRemediation, reason: str) -> tuple[str, str]:
        """Start the next rung for `source` (same alert), or link to that rung's active remediation.

        Returns (`started` or `linked`, remediation id); audited on both remediations.
        """
        active_key = active_key_of(new)
        try:
            async for attempt in on_conflict(IntegrityError, attempts=3):
                with attempt:  # another replica inserted the same active key a moment ago: link to it
                    async with self.transaction() as session:
                        return await self._create_escalation(session, source, new, reason, active_key)
        except IntegrityError:
            raise StoreUnavailable("could not record an escalation after concurrent starts") from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _create_escalation(
        self, session: AsyncSession, source: Remediation, new: NewRemediation, reason: str, active_key: str
    ) -> tuple[str, str]:
        now = self.clock()
        active = await session.scalar(select(Remediation).where(Remediation.active_key == active_key))
        if active is not None:
            await self.audit(session, "remediation.escalated", remediation_id=source.id,
                             data={"to": active.id, "playbook": new.playbook, "reason": reason, "linked": True})
            return "linked", active.id
        rem_id = str(uuid.uuid4())
        session.add(new_row(
            rem_id, new, active_key, now, alert_id=source.alert_id, fingerprint=source.alert_fingerprint,
            alertname=source.alertname, labels=source.alert_labels, annotations=source.alert_annotations, reason=reason,
        ))
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
            rem.updated_at = self.clock()
            await self.audit(session, "revert.waiting", remediation_id=rem_id,
                             data={"reason": reason, "step": rem.current_step})

    async def note_dependency_waiting(self, rem_id: str, owner: str, reason: str, dependency: str) -> bool:
        """Record that the remediation waits for `dependency` (`remediation.waiting`): its state reason becomes
        `reason` unless it already waits for that dependency (the first `since` is kept). True when it changed.
        """
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            if (rem.state_reason or "").startswith(f"{WAITING_PREFIX}{dependency} "):
                return False
            rem.state_reason = reason
            rem.updated_at = self.clock()
            await self.audit(session, "remediation.waiting", remediation_id=rem_id,
                             data={"reason": reason, "dependency": dependency, "state": rem.state,
                                   "step": rem.current_step})
            return True

    async def note_dependency_back(self, rem_id: str, owner: str) -> None:
        """The dependency answered again: a state reason still saying `waiting: ...` says so instead."""
        async with self.transaction() as session:
            rem = await self._get_for_update(session, rem_id, owner)
            waited = rem.state_reason or ""
            if not waited.startswith(WAITING_PREFIX):
                return
            rem.state_reason = "resumed after " + waited.removeprefix(WAITING_PREFIX)
            rem.updated_at = self.clock()
            await self.audit(session, "remediation.resumed", remediation_id=rem_id,
                             data={"waited": waited, "state": rem.state, "step": rem.current_step})

    async def waiting_by_dependency(self, dependencies: Sequence[str]) -> dict[str, int]:
        """Active remediations waiting for each of `dependencies` (their state reason says so)."""
        async with self.transaction() as session:
            found: dict[str, int] = {}
            for dependency in dependencies:
                count = await session.scalar(
                    select(func.count()).select_from(Remediation).where(
                        Remediation.finished_at.is_(None),
                        Remediation.state_reason.startswith(f"{WAITING_PREFIX}{dependency} ", autoescape=True),
                    )
                )
                found[dependency] = int(count or 0)
            return found

    async def wake_held(self) -> int:
        """Make every held remediation, and every undo waiting out a pause, due now (after resume, or when
        quarantine room frees). A crash backoff (`not_before`) still applies."""
        async with self.transaction() as session:
            result = await session.execute(
                update(Remediation)
                .where(Remediation.state.in_(("held", "reverting")))
                .values(next_run_at=self.clock())
            )
            return int(result.rowcount)  # type: ignore[attr-defined]

    async def get_remediations(self, ids: list[str]) -> dict[str, Remediation]:
        """Remediations by id (for replay); unknown ids are left out."""
        found: dict[str, Remediation] = {}
        async with self.transaction() as session:
            for start in range(0, len(ids), 500):
                rows = await session.scalars(select(Remediation).where(Remediation.id.in_(ids[start:start + 500])))
                found.update({rem.id: rem for rem in rows.all()})
        return found


def active_key_of(new: NewRemediation) -> str:
    """At most one active remediation per (target, playbook): the unique key that says so."""
    return f"{new.target_key}|{new.playbook}"


def new_row_for(rem_id: str, alert: AlertRow, new: NewRemediation, active_key: str, now: datetime) -> Remediation:
    """The row of a remediation started for a stored alert."""
    return Remediation(**new_values_for(rem_id, alert, new, active_key, now))


def new_values_for(
    rem_id: str, alert: AlertRow, new: NewRemediation, active_key: str, now: datetime
) -> dict[str, Any]:
    """The column values of a remediation started for a stored alert (`new_row_for`, or a batch insert)."""
    return new_values(rem_id, new, active_key, now, alert_id=alert.id, fingerprint=alert.fingerprint,
                      alertname=alert.alertname, labels=alert.labels, annotations=alert.annotations)


def new_row(
    rem_id: str, new: NewRemediation, active_key: str, now: datetime, *, alert_id: int | None, fingerprint: str,
    alertname: str, labels: Mapping[str, str], annotations: Mapping[str, str], reason: str | None = None,
) -> Remediation:
    """The row of a new remediation: pending, at its first step, runnable now."""
    return Remediation(**new_values(
        rem_id, new, active_key, now, alert_id=alert_id, fingerprint=fingerprint, alertname=alertname, labels=labels,
        annotations=annotations, reason=reason,
    ))


def new_values(
    rem_id: str, new: NewRemediation, active_key: str, now: datetime, *, alert_id: int | None, fingerprint: str,
    alertname: str, labels: Mapping[str, str], annotations: Mapping[str, str], reason: str | None = None,
) -> dict[str, Any]:
    """The column values of a new remediation (`new_row`, or a batch insert of several)."""
    return {
        "id": rem_id, "created_at": now, "updated_at": now, "finished_at": None, "state": "pending",
        "state_reason": reason, "rule": new.rule, "playbook": new.playbook,
        "definitions_version": new.definitions_version, "target_kind": new.target_kind, "target_key": new.target_key,
        "node": new.node, "gpu_uuid": new.gpu_uuid, "gpu_index": new.gpu_index, "namespace": new.namespace,
        "pod": new.pod, "alert_id": alert_id, "alert_fingerprint": fingerprint, "alertname": alertname,
        "alert_labels": dict(labels), "alert_annotations": dict(annotations), "alert_resolved": False,
        "params": jsonable(new.params), "plan": jsonable(new.plan), "context": {},
        "current_step": 0, "active_key": active_key, "quarantined": False, "linked_alerts": 0, "next_run_at": now,
        "crashes": 0,
    }

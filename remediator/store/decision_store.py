"""Deciding stored alerts a batch at a time: the facts a batch needs in two reads, its outcomes in one commit.

A storm of 10,000 alerts decided one transaction per alert spends its time in per-statement round trips
(and, on SQLite, in queueing behind the one writer), not in deciding. Here the worker reads the facts for a
whole claimed batch at once (recent alerts on the batch's GPUs, the batch's nodes' remediation history),
decides every alert in memory (engine/decision.py), and records all outcomes in one transaction: the
remediations started, the alerts linked to an active remediation or held by a cooldown, each with its
audit event, exactly as `record_firing` and `finish_alert` record them one by one.

When another replica started a remediation with the same active key while this batch was being decided
(a unique-key conflict, PostgreSQL with several replicas), the batch rolls back to a savepoint and is
recorded again against the active keys as they are then (the alert is linked to the other replica's
remediation). A batch that keeps conflicting is recorded alert by alert, each alert in its own transaction
(where one alert's conflict is retried on its own and cannot undo the others).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from remediator.domain.states import State
from remediator.errors import RemediatorError
from remediator.store.models import AlertRow, Remediation
from remediator.store.redelivery import ended_without_running
from remediator.store.remediation_store import RemediationStore, active_key_of, new_values_for
from remediator.store.transactions import _ALERTS, NewRemediation

__all__ = ["AlertOutcome", "DecisionStore", "Finished", "Lease", "Started", "active_by_key"]

_REMEDIATIONS = cast(Table, Remediation.__table__)
_CHUNK = 500
_FACT_ROWS = 256  # rows of a facts read decoded between yields to the event loop
_YIELD_EVERY = 64  # rows built between yields to the event loop (`_prepared_starts`)
_REPLANS = 4  # a batch recorded again after a conflict, this many times in all, before alert by alert


class _StillConflicting(RemediatorError):
    """A batch conflicted with other replicas' remediations every time it was recorded."""


@dataclass(frozen=True)
class Finished:
    """An alert that starts nothing: unmatched, no target, or an error while deciding it."""

    outcome: str
    note: str | None
    audit_kind: str
    audit_data: dict[str, Any]


@dataclass(frozen=True)
class Started:
    """An alert whose decision is to start `new` (linked or held by a cooldown if the store says so)."""

    new: NewRemediation


@dataclass(frozen=True)
class AlertOutcome:
    alert_id: int
    outcome: str
    remediation_id: str | None


@dataclass(frozen=True)
class Lease:
    """Lease up to `limit` of the remediations a batch starts to `owner` in the same transaction, so the
    worker that decided them drives them at once, without claiming them first."""

    owner: str
    duration: timedelta
    limit: int


@dataclass
class _Pending:
    """What one batch will write, collected in alert order."""

    remediations: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    linked: dict[str, int]
    audits: list[tuple[str, str | None, dict[str, Any]]]
    outcomes: list[AlertOutcome]
    leased: list[str] = field(default_factory=list)


class DecisionStore(RemediationStore):
    """Batched decisions (a mixin of `Repository`, over the one-at-a-time `RemediationStore`)."""

    async def firing_alerts_on_nodes(
        self, alertnames: Sequence[str], nodes: Sequence[str], since: datetime, node_labels: Sequence[str],
    ) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """(alert name, labels, annotations) of the firing first deliveries of these alert names received since `since`
        on any of `nodes` (named by any of `node_labels`, the controller's NODE_LABEL_PRECEDENCE)."""
        if not alertnames or not nodes:
            return []
        labels = AlertRow.labels
        found: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        names = sorted(set(alertnames))
        wanted = sorted(set(nodes))
        async with self.reading() as session:
            for i in range(0, len(wanted), _CHUNK):
                chunk = wanted[i : i + _CHUNK]
                rows = await session.stream(
                    select(AlertRow.alertname, AlertRow.labels, AlertRow.annotations).where(
                        AlertRow.alertname.in_(names), AlertRow.status == "firing", AlertRow.state != "repeat",
                        AlertRow.received_at >= since,
                        or_(*(labels[key].as_string().in_(chunk) for key in node_labels)),
                    )
                )
                # In a storm this is thousands of rows of labels and annotations to decode from JSON: fetched a
                # partition at a time, so the decoding is spread over turns of the event loop (webhooks go on
                # between them) instead of one stretch.
                async for partition in rows.partitions(_FACT_ROWS):
                    found.extend((str(name), dict(lab or {}), dict(ann or {})) for name, lab, ann in partition)
        return found

    async def node_histories(self, nodes: Sequence[str], since: datetime) -> dict[str, list[Remediation]]:
        """Remediations created since `since` on those of `nodes` where one of them returned its target to
        service (reverted, or succeeded without a quarantine), newest first. A node without such a remediation
        has no history the ladder reads (engine/decision.py `recurrence`), so its rows are not loaded: in a storm
        that is nearly every node, and their plans are kilobytes each."""
        history: dict[str, list[Remediation]] = defaultdict(list)
        wanted = sorted(set(nodes))
        returned = or_(
            Remediation.state == State.REVERTED,
            and_(Remediation.state.in_((State.SUCCEEDED, State.PLANNED)), Remediation.quarantined.is_(False)),
        )
        async with self.reading() as session:
            for i in range(0, len(wanted), _CHUNK):
                chunk = wanted[i : i + _CHUNK]
                with_returns = (await session.scalars(
                    select(Remediation.node).distinct().where(
                        Remediation.node.in_(chunk), Remediation.created_at >= since,
                        Remediation.finished_at.is_not(None), returned,
                    )
                )).all()
                if not with_returns:
                    continue
                rows = await session.scalars(
                    select(Remediation)
                    .where(Remediation.node.in_(list(with_returns)), Remediation.created_at >= since)
                    .order_by(Remediation.created_at.desc())
                )
                for rem in rows.all():
                    history[str(rem.node)].append(rem)
        return dict(history)

    async def record_decisions(self, decided: Sequence[tuple[AlertRow, Finished | Started]]) -> list[AlertOutcome]:
        """Record a batch's decisions in one transaction, in alert order (`record_and_lease` without a lease)."""
        outcomes, _ = await self.record_and_lease(decided, None)
        return outcomes

    async def record_and_lease(
        self, decided: Sequence[tuple[AlertRow, Finished | Started]], lease: Lease | None
    ) -> tuple[list[AlertOutcome], list[Remediation]]:
        """Record a batch's decisions in one transaction, in alert order; with `lease`, the first `lease.limit`
        remediations it starts are leased to `lease.owner` in that transaction and returned as committed.

        On PostgreSQL, a conflict (another replica committed a remediation with one of the batch's active
        keys while this batch was being recorded) rolls back to a savepoint and the batch is recorded again
        against the keys as they are now, so an alert on such a node is linked to the other replica's
        remediation. Only when that keeps conflicting is the batch recorded alert by alert (and nothing is
        leased)."""
        if not decided:
            return [], []
        prepared = await self._prepared_starts(decided)
        try:
            async with self.transaction() as session:
                if self.dialect == "sqlite":
                    # One writer, and this transaction read the active keys under it: no other transaction can
                    # take one meanwhile, so no savepoint (two round trips fewer while the writer is held). A
                    # conflict all the same fails the whole batch, which is then recorded alert by alert.
                    return await self._record_decisions(session, decided, lease, prepared)
                for _ in range(_REPLANS):
                    queued = len(self._audit_queue(session))
                    try:
                        async with session.begin_nested():
                            return await self._record_decisions(session, decided, lease, prepared)
                    except IntegrityError:
                        del self._audit_queue(session)[queued:]
                raise _StillConflicting
        except (IntegrityError, _StillConflicting):
            return [await self._record_one(row, verdict) for row, verdict in decided], []

    async def _record_one(self, row: AlertRow, verdict: Finished | Started) -> AlertOutcome:
        if isinstance(verdict, Started):
            outcome, rem_id = await self.record_firing(row, verdict.new)
            return AlertOutcome(row.id, outcome, rem_id or None)
        async with self.transaction() as session:
            await self._finish_alert(session, row.id, verdict.outcome, note=verdict.note, remediation_id=None)
            await self.audit(session, verdict.audit_kind, data=verdict.audit_data)
        return AlertOutcome(row.id, verdict.outcome, None)

    async def _prepared_starts(
        self, decided: Sequence[tuple[AlertRow, Finished | Started]]
    ) -> dict[int, dict[str, Any]]:
        """The rows of the remediations the batch will likely start, by alert id, built before the transaction.

        Building a row (a fresh id, the plan copied as JSON) is most of the CPU of recording a batch; built
        inside the transaction it held SQLite's one writer (and the webhooks queued behind it) that much
        longer. Built here for the first alert of each active key no remediation holds yet (read beside the
        writer); `_start` still decides under the transaction against the keys as they are then, and builds
        inline the rare row not prepared here."""
        starts = [(row, verdict.new) for row, verdict in decided if isinstance(verdict, Started)]
        if not starts:
            return {}
        async with self.reading() as session:
            taken = set(await active_by_key(session, [active_key_of(new) for _, new in starts]))
        prepared: dict[int, dict[str, Any]] = {}
        for i, (row, new) in enumerate(starts):
            if i and not i % _YIELD_EVERY:
                await asyncio.sleep(0)  # outside any transaction: webhooks go on between slices
            key = active_key_of(new)
            if key in taken:
                continue
            taken.add(key)
            prepared[row.id] = new_values_for(str(uuid.uuid4()), row, new, key, self.clock())
        return prepared

    async def _record_decisions(
        self, session: AsyncSession, decided: Sequence[tuple[AlertRow, Finished | Started]], lease: Lease | None,
        prepared: dict[int, dict[str, Any]],
    ) -> tuple[list[AlertOutcome], list[Remediation]]:
        starts = [v.new for _, v in decided if isinstance(v, Started)]
        active = await self._active_by_key(session, [active_key_of(n) for n in starts])
        cooled = await self._recently_finished(session, starts)
        pending = _Pending([], [], defaultdict(int), [], [])
        for row, verdict in decided:
            if isinstance(verdict, Finished):
                self._finish(pending, row, verdict.outcome, None, note=verdict.note)
                pending.audits.append((verdict.audit_kind, None, verdict.audit_data))
            else:
                self._start(pending, row, verdict.new, active, cooled, lease, prepared.get(row.id))
        if pending.remediations:
            # In active-key order: two replicas inserting overlapping batches take the keys' locks in the
            # same order, so one waits for the other (and then conflicts) instead of deadlocking.
            pending.remediations.sort(key=lambda values: str(values["active_key"]))
            await session.execute(insert(_REMEDIATIONS), pending.remediations)
        if pending.linked:
            await session.execute(
                update(_REMEDIATIONS)
                .where(_REMEDIATIONS.c.id == bindparam("b_id"))
                .values(linked_alerts=_REMEDIATIONS.c.linked_alerts + bindparam("b_count")),
                [{"b_id": rem_id, "b_count": count} for rem_id, count in pending.linked.items()],
            )
        await session.execute(
            update(_ALERTS)
            .where(_ALERTS.c.id == bindparam("b_id"))
            .values(state="done", outcome=bindparam("b_outcome"), note=bindparam("b_note"),
                    remediation_id=bindparam("b_rem"), processed_at=bindparam("b_at"), claim_expires=None),
            pending.alerts,
        )
        await self.audit_many(session, pending.audits)
        leased: list[Remediation] = []
        if pending.leased:
            rows = {r.id: r for r in (await session.scalars(
                select(Remediation).where(Remediation.id.in_(pending.leased))
            )).all()}
            leased = [rows[rem_id] for rem_id in pending.leased]
        return pending.outcomes, leased

    def _finish(self, pending: _Pending, row: AlertRow, outcome: str, rem_id: str | None, *, note: str | None) -> None:
        pending.alerts.append(
            {"b_id": row.id, "b_outcome": outcome, "b_note": note, "b_rem": rem_id, "b_at": self.clock()}
        )
        pending.outcomes.append(AlertOutcome(row.id, outcome, rem_id))

    def _start(
        self, pending: _Pending, row: AlertRow, new: NewRemediation, active: dict[str, str],
        cooled: dict[tuple[str, str], list[tuple[str, datetime]]], lease: Lease | None,
        prepared: dict[str, Any] | None,
    ) -> None:
        key = active_key_of(new)
        now = self.clock()
        if key in active:
            rem_id = active[key]
            pending.linked[rem_id] += 1
            self._finish(pending, row, "linked", rem_id, note=None)
            pending.audits.append(("alert.linked", rem_id, {
                "alert_id": row.id, "fingerprint": row.fingerprint, "alertname": row.alertname}))
            return
        if new.cooldown:
            recent = next(
                (rid for rid, at in cooled.get((new.rule, new.target_key), []) if at > now - new.cooldown), None
            )
            if recent is not None:
                self._finish(pending, row, "cooldown", recent, note=f"cooldown after {recent}")
                pending.audits.append(("alert.cooldown", recent, {
                    "alert_id": row.id, "rule": new.rule, "target": new.target_key}))
                return
        values = prepared if prepared is not None else new_values_for(str(uuid.uuid4()), row, new, key, now)
        rem_id = str(values["id"])
        active[key] = rem_id
        leased = lease is not None and len(pending.leased) < lease.limit
        values["lease_owner"] = lease.owner if lease is not None and leased else None
        values["lease_expires"] = now + lease.duration if lease is not None and leased else None
        if leased:
            pending.leased.append(rem_id)
        pending.remediations.append(values)
        self._finish(pending, row, "started", rem_id, note=None)
        pending.audits.append(("remediation.created", rem_id, {
            "rule": new.rule, "playbook": new.playbook, "target": new.target_key, "alert_id": row.id,
            "alertname": row.alertname, "definitions_version": new.definitions_version}))

    async def _active_by_key(self, session: AsyncSession, keys: Sequence[str]) -> dict[str, str]:
        return await active_by_key(session, keys)

    async def _recently_finished(
        self, session: AsyncSession, starts: Sequence[NewRemediation]
    ) -> dict[tuple[str, str], list[tuple[str, datetime]]]:
        """Finished remediations within the longest cooldown of the batch, by (rule, target key)."""
        with_cooldown = [n for n in starts if n.cooldown]
        if not with_cooldown:
            return {}
        since = self.clock() - max(n.cooldown for n in with_cooldown if n.cooldown)
        found: dict[tuple[str, str], list[tuple[str, datetime]]] = defaultdict(list)
        targets = sorted({n.target_key for n in with_cooldown})
        for i in range(0, len(targets), _CHUNK):
            rows = await session.execute(
                select(Remediation.rule, Remediation.target_key, Remediation.id, Remediation.finished_at).where(
                    Remediation.target_key.in_(targets[i : i + _CHUNK]), Remediation.finished_at.is_not(None),
                    Remediation.finished_at > since,
                    # The cooldown is for remediations that ran: one the driver's crashes ended (a dependency
                    # that kept failing before transient errors waited instead, or an unexpected error), or a
                    # permanent error before its first step, did not, so a re-delivery of its still-firing
                    # alert starts a new one (store/redelivery.py).
                    ~ended_without_running(),
                )
            )
            for rule, target, rem_id, finished in rows.all():
                if finished is not None:
                    found[(str(rule), str(target))].append((str(rem_id), finished))
        return found


async def active_by_key(session: AsyncSession, keys: Sequence[str]) -> dict[str, str]:
    """Active key -> id of the remediation holding it, for those of `keys` one holds."""
    found: dict[str, str] = {}
    wanted = sorted(set(keys))
    for i in range(0, len(wanted), _CHUNK):
        rows = await session.execute(
            select(Remediation.active_key, Remediation.id).where(Remediation.active_key.in_(wanted[i : i + _CHUNK]))
        )
        found.update({str(key): str(rem_id) for key, rem_id in rows.all()})
    return found

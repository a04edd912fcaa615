"""Reads for the API, UI, guardrails and reports: lists, counts and the facts guardrails decide on."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Select, exists, false, func, literal, or_, select, true
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from remediator.domain.json_values import JsonObject, JsonValue
from remediator.domain.states import ACTIVE_STATES, State
from remediator.store.models import (
    AlertRow,
    AuditEvent,
    ControllerState,
    Remediation,
    StepRow,
)
from remediator.store.transactions import (
    BREAKER_MEMO,
    BreakerMemo,
    RepositoryBase,
)

__all__ = ["ReadStore", "RemediationSummary", "SteadyCounts", "SteadyQuery", "flag_value", "steady_counts"]

_Q = TypeVar("_Q", bound=Select[Any])


@dataclass(frozen=True, slots=True)
class RemediationSummary:
    """One line of a remediation list: the columns the UI index and the guardrail banner show, and the plan's
    `xid` entry (read in SQL, so the plan itself, ~2 KB of JSON a row, is neither loaded nor parsed)."""

    id: str
    created_at: datetime
    state: str
    state_reason: str | None
    playbook: str
    target_key: str
    node: str | None
    namespace: str | None
    gpu_index: str | None
    gpu_uuid: str | None
    alertname: str
    alert_labels: dict[str, str]
    plan_xid: JsonValue  # the plan's `xid` entry (domain/plan_snapshot.py)


@dataclass(frozen=True, slots=True)
class SteadyQuery:
    """What an admission asks about one remediation before the admission lock (`steady_counts`):
    whether `override_key` is set, how often the alert (`fingerprint`) resolved since `flap_since` (first
    deliveries only), and how many other remediations (not `exclude`) of `node` started acting (a forward step
    succeeded) since `node_since`; `node` None when that does not matter (the playbook does not quarantine)."""

    override_key: str
    fingerprint: str
    flap_since: datetime
    node: str | None
    node_since: datetime
    exclude: str


@dataclass(frozen=True, slots=True)
class SteadyCounts:
    """The answers to one `SteadyQuery`, and the pause flag's value as the admission read it under its lock
    (`RemediationStore.admit_many` fills it: the kill switch is seen as it is when the batch decides)."""

    override: bool
    flaps: int
    node_remediations: int
    pause: dict[str, Any] | None = None


def _flap_count(fingerprint: str, since: datetime) -> Select[Any]:
    return select(func.count()).where(
        AlertRow.fingerprint == fingerprint, AlertRow.status == "resolved", AlertRow.state != "repeat",
        AlertRow.received_at >= since,
    )


def _node_count(node: str, since: datetime, exclude: str) -> Select[Any]:
    return select(func.count(func.distinct(Remediation.id))).where(
        Remediation.node == node, Remediation.created_at >= since, Remediation.id != exclude,
        Remediation.id.in_(select(StepRow.remediation_id).where(StepRow.phase == "forward",
                                                                 StepRow.status == "succeeded")),
    )


async def steady_counts(session: AsyncSession, queries: Sequence[SteadyQuery]) -> list[SteadyCounts]:
    """The answers to `queries`, in their order: one statement of scalar subqueries for a whole admission
    batch (three round trips a remediation were on its path)."""
    if not queries:
        return []
    columns: list[Any] = []
    for q in queries:
        columns += [
            exists().where(ControllerState.key == q.override_key),
            _flap_count(q.fingerprint, q.flap_since).scalar_subquery(),
            literal(0) if q.node is None else _node_count(q.node, q.node_since, q.exclude).scalar_subquery(),
        ]
    row = (await session.execute(select(*columns))).one()
    return [
        SteadyCounts(override=bool(row[3 * i]), flaps=int(row[1 + 3 * i] or 0),
                     node_remediations=int(row[2 + 3 * i] or 0))
        for i in range(len(queries))
    ]


async def flag_value(session: AsyncSession, key: str) -> JsonObject | None:
    """A flag's value read in SQL (never from the session's identity map): as committed, or as this
    transaction wrote it."""
    value = await session.scalar(select(ControllerState.value).where(ControllerState.key == key))
    return dict(value) if isinstance(value, dict) else None


_SUMMARY_COLUMNS = (
    Remediation.id, Remediation.created_at, Remediation.state, Remediation.state_reason, Remediation.playbook,
    Remediation.target_key, Remediation.node, Remediation.namespace, Remediation.gpu_index, Remediation.gpu_uuid,
    Remediation.alertname, Remediation.alert_labels, Remediation.plan["xid"].label("plan_xid"),
)


def _naive_utc(at: datetime) -> datetime:
    """A bound for a timestamp column (stored as naive UTC)."""
    return at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo is not None else at


def _filtered(query: _Q, state: str | None, node: str | None) -> _Q:
    """The list's filters, newest first by (created_at, id): a page comes out of the state or node index."""
    if state:
        query = query.where(Remediation.state == state)
    if node:
        query = query.where(Remediation.node == node)
    return query.order_by(Remediation.created_at.desc(), Remediation.id)


class ReadStore(RepositoryBase):
    """Reads for the API, UI, guardrails and reports (a mixin of `Repository`)."""

    async def list_remediations(
        self, *, state: str | None = None, node: str | None = None, limit: int = 100, offset: int = 0,
        id_prefix: str | None = None, leave_out: Collection[str] = (), gpu: str | None = None,
    ) -> list[Remediation]:
        """Remediations newest first, without the columns named in `leave_out` (of LARGE_COLUMNS): touching
        one of those on a returned row raises instead of loading it. `gpu`: only those of this GPU UUID."""
        async with self.transaction() as session:
            query = select(Remediation)
            if leave_out:
                query = query.options(*(defer(getattr(Remediation, c), raiseload=True) for c in leave_out))
            if id_prefix:
                query = query.where(Remediation.id.startswith(id_prefix, autoescape=True))
            if gpu:
                query = query.where(Remediation.gpu_uuid == gpu)
            query = _filtered(query, state, node).limit(limit).offset(offset)
            return list((await session.scalars(query)).all())

    async def remediation_summaries(
        self, *, state: str | None = None, node: str | None = None, limit: int = 200
    ) -> list[RemediationSummary]:
        """What a list page shows of the newest remediations, in the order of `list_remediations`.

        Plain rows rather than ORM objects: no identity map, no per-row instance state, and only the one
        timestamp shown parsed (SQLite stores timestamps as text).
        """
        async with self.transaction() as session:
            rows = await session.execute(_filtered(select(*_SUMMARY_COLUMNS), state, node).limit(limit))
            return [RemediationSummary(*row) for row in rows.all()]

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
        self, *, remediation_id: str | None = None, after_id: int = 0, limit: int = 1000, node: str | None = None,
        since: datetime | None = None, until: datetime | None = None,
    ) -> list[AuditEvent]:
        """Audit events oldest first; `node`: only those of remediations on that node; `since` (inclusive) and
        `until` (exclusive): only those written in that span."""
        async with self.transaction() as session:
            query = select(AuditEvent).where(AuditEvent.id > after_id)
            if since is not None:
                query = query.where(AuditEvent.ts >= _naive_utc(since))
            if until is not None:
                query = query.where(AuditEvent.ts < _naive_utc(until))
            if remediation_id:
                query = query.where(AuditEvent.remediation_id == remediation_id)
            if node:
                on_node = select(Remediation.id).where(Remediation.node == node)
                query = query.where(AuditEvent.remediation_id.in_(on_node))
            query = query.order_by(AuditEvent.id).limit(limit)
            return list((await session.scalars(query)).all())

    async def alerts_of(self, remediation_id: str, *, limit: int = 10000) -> list[AlertRow]:
        """The stored alerts that started or joined a remediation (its incident record), oldest first."""
        async with self.transaction() as session:
            query = select(AlertRow).where(AlertRow.remediation_id == remediation_id)
            return list((await session.scalars(query.order_by(AlertRow.id).limit(limit))).all())

    async def audit_between(self, first_id: int, last_id: int) -> list[AuditEvent]:
        """Every audit event with an id from `first_id` to `last_id`, in id order (a segment of the chain)."""
        async with self.transaction() as session:
            query = select(AuditEvent).where(AuditEvent.id >= first_id, AuditEvent.id <= last_id)
            return list((await session.scalars(query.order_by(AuditEvent.id))).all())

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
        """Nodes under quarantine. In an admission batch (`admit_many`), read once under the admission lock;
        the batch adds the quarantines it starts, and no other replica starts one while it holds the lock."""
        memo: BreakerMemo | None = session.info.get(BREAKER_MEMO)
        if memo is not None and memo.quarantined is not None:
            return set(memo.quarantined)
        rows = await session.scalars(
            select(Remediation.node).where(Remediation.quarantined == true(), Remediation.node.is_not(None)).distinct()
        )
        nodes = {n for n in rows.all() if n}
        if memo is not None:
            memo.quarantined = set(nodes)
        return nodes

    async def held_for_room_before(
        self, session: AsyncSession, rem_id: str, created_at: datetime, node: str | None, reason_prefix: str
    ) -> set[str]:
        """Nodes of the held remediations whose reason starts with `reason_prefix` (the circuit breaker's) and
        that were created before this one: the queue ahead of it for quarantine room. `node` is left out.
        In an admission batch the queue is read once (every held remediation with such a reason) and kept
        current by the batch (`BreakerMemo.decided`)."""
        queued = (
            Remediation.state == State.HELD,
            Remediation.state_reason.startswith(reason_prefix, autoescape=True),
            Remediation.node.is_not(None),
        )
        memo: BreakerMemo | None = session.info.get(BREAKER_MEMO)
        if memo is not None and (memo.held is None or memo.held_prefix != reason_prefix):
            queue = await session.execute(
                select(Remediation.id, Remediation.created_at, Remediation.node).where(*queued)
            )
            memo.held_prefix = reason_prefix
            memo.held = {
                str(held_id): (held_at, str(held_node))
                for held_id, held_at, held_node in queue.all()
                if held_node and held_at is not None
            }
        if memo is not None and memo.held is not None:
            mine = created_at
            return {
                held_node for held_id, (at, held_node) in memo.held.items()
                if (at < mine or (at == mine and held_id < rem_id)) and held_node != node
            }
        rows = await session.scalars(
            select(Remediation.node).where(
                *queued,
                or_(Remediation.created_at < created_at,
                    (Remediation.created_at == created_at) & (Remediation.id < rem_id)),
            ).distinct()
        )
        return {n for n in rows.all() if n and n != node}

    async def recent_quarantine_starts(self, session: AsyncSession, since: datetime) -> int:
        """Quarantines started since `since`. In an admission batch, read once under the admission lock and
        counted on by the batch as it starts quarantines (their audit events are appended at its commit)."""
        memo: BreakerMemo | None = session.info.get(BREAKER_MEMO)
        if memo is not None and memo.starts is not None:
            return memo.starts
        count = int(await session.scalar(
            select(func.count()).where(AuditEvent.kind == "quarantine.started", AuditEvent.ts >= since)
        ) or 0)
        if memo is not None:
            memo.starts = count
        return count

    async def quarantine_status(self, since: datetime) -> tuple[set[str], int]:
        """The nodes under quarantine and the quarantines started since `since`, read in one transaction."""
        async with self.transaction() as session:
            return await self.quarantined_nodes(session), await self.recent_quarantine_starts(session, since)

    async def node_history(self, node: str, *, since: datetime | None = None, limit: int = 200) -> list[Remediation]:
        """Remediations on one node, newest first (the escalation ladder and RMA summaries read them)."""
        async with self.transaction() as session:
            query = select(Remediation).where(Remediation.node == node)
            if since is not None:
                query = query.where(Remediation.created_at >= since)
            rows = await session.scalars(query.order_by(Remediation.created_at.desc()).limit(limit))
            return list(rows.all())

    async def held(self) -> list[RemediationSummary]:
        return await self.remediation_summaries(state="held", limit=1000)

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

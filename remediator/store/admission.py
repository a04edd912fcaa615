"""What the store asks of an admission, and what an admission may read while it is decided.

`RemediationStore.admit_many` decides a batch of admissions in one transaction under the admission lock. It
knows nothing of the engine: each request is an `Admission` (the remediation, its lease owner, what to store
with it, and two questions: its guardrail facts given the reads available inside the admitting transaction,
and the verdict on those facts). The reads are an `AdmissionReads`: the breaker's counts (kept current by the
batch as it starts quarantines and holds remediations) and the storm window, read and written in the admitting
transaction in the order the admissions are decided. The engine never sees a database session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from remediator.domain.guardrails import GuardrailFacts, Verdict
from remediator.domain.json_values import JsonObject
from remediator.store.read_store import SteadyCounts, SteadyQuery
from remediator.store.step_store import BeginStep
from remediator.store.storm_records import StormRecord

if TYPE_CHECKING:
    from remediator.store.remediation_store import RemediationStore

__all__ = ["Admission", "AdmissionReads", "SessionReads", "WindowFault"]

# (node, alert name, plan, alert labels, context, created) of a remediation in the storm window.
WindowFault = tuple[str, str, JsonObject, dict[str, str], dict[str, Any], datetime]


class AdmissionReads(Protocol):
    """What an admission reads (and the storm guard writes) inside the admitting transaction, under the
    admission lock. The breaker's reads are read once a batch and kept current by the batch."""

    async def quarantined_nodes(self) -> set[str]:
        """Nodes under quarantine, the batch's own quarantines included."""
        ...

    async def held_for_room_before(
        self, rem_id: str, created_at: datetime, node: str | None, reason_prefix: str
    ) -> set[str]:
        """Nodes of the remediations held for room (reason `reason_prefix`) created before this one."""
        ...

    async def recent_quarantine_starts(self, since: datetime) -> int:
        """Quarantines started since `since`, the batch's own included."""
        ...

    async def window_faults(self, since: datetime) -> list[WindowFault]:
        """The remediations created since `since` (the storm window), as the batch left them."""
        ...

    async def window_keys(self, since: datetime) -> list[tuple[str, bool]]:
        """(id, whether its context is stored yet) of the remediations created since `since`: what a reader that
        keeps the window's faults needs to know which rows to read again (`window_faults_of`)."""
        ...

    async def window_faults_of(self, ids: Sequence[str]) -> dict[str, WindowFault]:
        """The faults of these remediations, by id, as the batch left them."""
        ...

    async def live_storms(self) -> list[StormRecord]:
        """The storms not closed, oldest first."""
        ...

    async def record_storm(
        self, key: str, value: str, text: str, nodes: Sequence[str], analysis: JsonObject
    ) -> tuple[StormRecord, bool]:
        """Open a storm for this cause, or grow the live one: (its record, whether it changed)."""
        ...

    async def close_storms(self, before: datetime) -> list[str]:
        """Close the decided storms that have not grown since `before`; their ids."""
        ...


class Admission(Protocol):
    """One remediation to admit (`RemediationStore.admit_many`)."""

    @property
    def rem_id(self) -> str: ...

    @property
    def owner(self) -> str:
        """The lease owner the remediation must still have; else this request fails alone (LeaseLost)."""
        ...

    @property
    def context(self) -> JsonObject | None:
        """A context gathered for it, stored in the admitting transaction (audited `context.gathered`)."""
        ...

    @property
    def steady(self) -> SteadyQuery | None:
        """The facts about it alone, read for the whole batch before the lock (`read_store.steady_counts`)."""
        ...

    @property
    def first_step(self) -> BeginStep | None:
        """A new remediation's first step, begun in the admitting transaction when it is admitted (only from
        `pending`: one that was held or has run has its own rows and goes the step's usual way)."""
        ...

    async def facts(self, reads: AdmissionReads, counts: SteadyCounts | None) -> GuardrailFacts:
        """The facts the verdict is decided on, under the admission lock, given the answers to `steady` (None
        without a `steady` query), in the order the batch decides its requests."""
        ...

    def verdict(self, facts: GuardrailFacts) -> Verdict:
        """The guardrails' verdict on `facts`."""
        ...


@dataclass(frozen=True)
class SessionReads:
    """`AdmissionReads` in one transaction of the store."""

    store: RemediationStore
    session: AsyncSession

    async def quarantined_nodes(self) -> set[str]:
        return await self.store.quarantined_nodes(self.session)

    async def held_for_room_before(
        self, rem_id: str, created_at: datetime, node: str | None, reason_prefix: str
    ) -> set[str]:
        return await self.store.held_for_room_before(self.session, rem_id, created_at, node, reason_prefix)

    async def recent_quarantine_starts(self, since: datetime) -> int:
        return await self.store.recent_quarantine_starts(self.session, since)

    async def window_faults(self, since: datetime) -> list[WindowFault]:
        return await self.store.window_faults(since, self.session)

    async def window_keys(self, since: datetime) -> list[tuple[str, bool]]:
        return await self.store.window_keys(since, self.session)

    async def window_faults_of(self, ids: Sequence[str]) -> dict[str, WindowFault]:
        return await self.store.window_faults_of(ids, self.session)

    async def live_storms(self) -> list[StormRecord]:
        return await self.store.live_storms(self.session)

    async def record_storm(
        self, key: str, value: str, text: str, nodes: Sequence[str], analysis: JsonObject
    ) -> tuple[StormRecord, bool]:
        return await self.store.record_storm(key, value, text, nodes, analysis, self.session)

    async def close_storms(self, before: datetime) -> list[str]:
        return await self.store.close_storms(before, self.session)

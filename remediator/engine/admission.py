"""Admission: a pending or held remediation asks the guardrails whether it may start.

The context is read first (once: it is stored with the admission and kept while the remediation is held), the
first step is prepared to begin with the admission (engine/step_lifecycle.py), and the request goes to the store
with this replica's others (engine/admissions.py, `RemediationStore.admit_many`). The store asks each
request (a `RemediationAdmission`, the store's `Admission`) for its guardrail facts under the admission lock,
giving it the reads of the admitting transaction (`AdmissionReads`: the breaker's counts, the storm window),
and for the verdict on them (domain/guardrails.py). The facts about the remediation alone (`SteadyFacts`: the
pause flag, the override, flapping, the node's history) were read for the whole batch before the lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from remediator.actions.base import Target
from remediator.actions.context import Gathered
from remediator.domain.guardrails import (
    BREAKER_REASON,
    FleetState,
    GuardrailFacts,
    Verdict,
    guardrail_facts,
    guardrail_verdict,
)
from remediator.domain.json_values import JsonObject
from remediator.domain.pauses import ActivePause, held_by
from remediator.domain.plan_snapshot import playbook_of
from remediator.domain.states import Event, State
from remediator.engine.admissions import AdmissionQueue
from remediator.engine.early_contexts import ContextPrefetch
from remediator.engine.moves import move, notify
from remediator.engine.planning import quarantines as playbook_quarantines
from remediator.engine.planning import target_of
from remediator.engine.runtime import Runtime
from remediator.engine.step_lifecycle import PreparedStep
from remediator.engine.step_stages import failure_reason
from remediator.engine.storm_guard import StormGuard
from remediator.errors import PermanentError
from remediator.kube.views import Body
from remediator.kube.vocabulary import excluded
from remediator.retrying import CONTEXT_READ_FAILED, transient_policy
from remediator.settings import Settings
from remediator.store.admission import AdmissionReads
from remediator.store.flag_store import OVERRIDE_FLAG_PREFIX
from remediator.store.models import Remediation
from remediator.store.read_store import SteadyCounts, SteadyQuery
from remediator.store.step_store import BeginStep

__all__ = [
    "Admitting", "RemediationAdmission", "SteadyFacts", "admit", "breaker_facts", "quarantines", "steady_facts",
]


class Admitting(Protocol):
    """What an admission uses of the executor that drives the remediation."""

    @property
    def rt(self) -> Runtime: ...

    @property
    def admissions(self) -> AdmissionQueue: ...

    @property
    def contexts(self) -> ContextPrefetch: ...

    @property
    def storms(self) -> StormGuard: ...

    async def read_context(self, target: Target, labels: Mapping[str, str], rem_id: str | None) -> Gathered: ...

    async def _prepare_first(self, rem: Remediation, node: dict[str, Any] | None) -> PreparedStep | None: ...

    async def _live_labels(self, rem: Remediation) -> dict[str, str] | None: ...


@dataclass(frozen=True)
class SteadyFacts:
    """The guardrail facts about one remediation alone, read before the admission lock (`steady_facts`)."""

    now: datetime
    paused: bool
    node_excluded: bool
    flapping: bool
    node_recent_remediations: int
    override: bool
    pause_reason: str | None = None  # a scoped pause holds it (domain/pauses.py)
    storm_reason: str | None = None  # it shares an open storm's suspected cause (engine/storm_guard.py)


def quarantines(rt: Runtime, rem: Remediation) -> bool:
    """Whether the remediation's playbook quarantines its node (one of its actions does)."""
    return playbook_quarantines(playbook_of(rem), rt.actions)


def steady_facts(
    settings: Settings, rem: Remediation, now: datetime, counts: SteadyCounts, *,
    labels: Mapping[str, str] | None = None, scoped: ActivePause | None = None, storm: str | None = None,
) -> SteadyFacts:
    """The guardrail facts about this remediation alone (pause, override, flapping, the node's history), from
    what the admission batch read for it before the admission lock: other admissions do not change them."""
    node_labels = labels if labels is not None else (rem.context.get("node") or {}).get("labels") or {}
    flag = bool(counts.pause and counts.pause.get("paused"))
    return SteadyFacts(
        now=now,
        paused=flag or scoped is not None,
        node_excluded=excluded(node_labels),
        flapping=counts.flaps >= settings.flap_threshold > 0,
        node_recent_remediations=counts.node_remediations,
        override=counts.override,
        pause_reason=None if flag or scoped is None else scoped.describe(),
        storm_reason=storm,
    )


async def breaker_facts(
    rt: Runtime, reads: AdmissionReads, rem: Remediation, quarantines: bool, steady: SteadyFacts
) -> GuardrailFacts:
    """The facts every admission changes (quarantined nodes, recent starts, the held queue), read under the
    admission lock, with the steady ones read before it."""
    settings = rt.settings
    now = steady.now
    quarantined = frozenset(await reads.quarantined_nodes())
    limit = settings.quarantine_limit.resolve(rt.gpu_nodes)
    queued_ahead = 0
    if quarantines and rem.node not in quarantined and len(quarantined) < limit:  # room: is a queue ahead?
        ahead = await reads.held_for_room_before(rem.id, rem.created_at, rem.node, BREAKER_REASON)
        queued_ahead = len(ahead - quarantined)
    fleet = FleetState(
        quarantined_nodes=quarantined, gpu_nodes=rt.gpu_nodes, limit_nodes=limit, queued_ahead=queued_ahead,
        recent_quarantine_starts=await reads.recent_quarantine_starts(now - settings.quarantine_rate_window),
    )
    return guardrail_facts(
        settings, now=now, node=rem.node, node_excluded=steady.node_excluded, quarantines=quarantines, fleet=fleet,
        paused=steady.paused, pause_reason=steady.pause_reason, flapping=steady.flapping,
        node_recent_remediations=steady.node_recent_remediations, override=steady.override,
        storm_reason=steady.storm_reason,
    )


@dataclass(frozen=True)
class RemediationAdmission:
    """One remediation's admission, as the store asks it (store/admission.py `Admission`)."""

    rt: Runtime
    storms: StormGuard
    rem: Remediation
    labels: Mapping[str, str] | None  # the node's labels as they are now
    scoped: ActivePause | None  # a scoped pause that holds it
    quarantines: bool
    context: JsonObject | None = None
    steady: SteadyQuery | None = None
    first_step: BeginStep | None = None

    @property
    def rem_id(self) -> str:
        return self.rem.id

    @property
    def owner(self) -> str:
        return self.rt.owner

    async def facts(self, reads: AdmissionReads, counts: SteadyCounts | None) -> GuardrailFacts:
        assert counts is not None  # asked for with `steady`
        # The time of the decision (the request may have waited for an earlier batch to commit).
        at = self.rt.clock()
        storm = await self.storms.hold(self.rem, at, reads)  # in the admitting transaction, in order
        steady = steady_facts(self.rt.settings, self.rem, at, counts, labels=self.labels, scoped=self.scoped,
                              storm=storm)
        return await breaker_facts(self.rt, reads, self.rem, self.quarantines, steady)

    def verdict(self, facts: GuardrailFacts) -> Verdict:
        return guardrail_verdict(facts)


async def admit(ex: Admitting, rem: Remediation) -> tuple[Remediation, PreparedStep | None] | None:
    """Gather the context (first time only) and ask the guardrails; the started remediation with its first
    step when the admission began it (engine/step_lifecycle.py), or None when it
    is held."""
    rt = ex.rt
    gathered: JsonObject | None = None
    node: JsonObject | None = None
    if not rem.context:  # stored with the admission (one transaction); kept when the remediation is held
        prefetched = [ex.contexts.take(rem.alert_id)]

        async def read_once() -> Gathered:
            # The read ahead's answer first (its transient error waits like any other), then a new read.
            if prefetched:
                got = await prefetched.pop()
                if got is not None:
                    return got
            return await ex.read_context(target_of(rem), rem.alert_labels, rem.id)

        # Transient failures wait and retry within the budget; then the remediation waits (drive). A
        # permanent one (a pod name the API refuses, 403) ends it once, with the API's message.
        try:
            read = await transient_policy(rt.settings).call(read_once)
        except PermanentError as exc:
            error = failure_reason(exc)
            await move(rt, rem.id, Event.CRASH, reason=f"{CONTEXT_READ_FAILED}{error}",
                       owner=rt.owner, data={"error": error}, detail=error)
            return None
        rem.context = gathered = read.context
        node = read.node
    first = await ex._prepare_first(rem, node) if rem.state == State.PENDING else None
    # The opt-out label and the scoped pauses as they are now (the context's labels are those of its read).
    labels = Body(node).labels if node is not None and gathered is not None else await ex._live_labels(rem)
    scoped = held_by(await rt.repo.active_pauses(), rem.node, labels, rem.playbook)
    quarantining = quarantines(rt, rem)
    settings = rt.settings
    now = rt.clock()
    steady = SteadyQuery(
        override_key=f"{OVERRIDE_FLAG_PREFIX}{rem.id}", fingerprint=rem.alert_fingerprint,
        flap_since=now - settings.flap_window, node=rem.node if quarantining else None,
        node_since=now - settings.node_repeat_window, exclude=rem.id,
    )
    admitted, verdict, changed = await ex.admissions.admit(RemediationAdmission(
        rt, ex.storms, rem, labels, scoped, quarantining, context=gathered, steady=steady,
        first_step=first.begin if first is not None else None,
    ))
    held = admitted.state == State.HELD
    ex.storms.announce(verdict.reason if held and changed and verdict.name == "storm" else None)
    if held:
        if changed:  # a new trip, not a re-check of one already counted and announced
            rt.metrics.guardrail_trips.labels(guardrail=verdict.name).inc()
            if verdict.name != "storm":  # the storm's one message, updated in place, tells of every hold
                await notify(rt, rem.id, "held", verdict.reason)
        return None
    await notify(rt, rem.id, "started", verdict.reason)
    return admitted, first

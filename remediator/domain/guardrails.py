"""Guardrail decisions as pure functions over facts read in the admitting transaction.

The worker gathers `GuardrailFacts` inside the same transaction that starts the remediation (under an
advisory lock on PostgreSQL), so replicas cannot overshoot the quarantine limit together. Reverts are never
subject to guardrails: undoing a quarantine is always allowed. Room under the breaker goes to the held
remediations in the order they were created: one created later waits while older ones are held for room.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Protocol

from remediator.kube.vocabulary import EXCLUDE_LABEL

__all__ = [
    "BREAKER_REASON", "FleetState", "GuardrailFacts", "GuardrailSettings", "MaintenanceWindow", "Verdict",
    "guardrail_facts", "guardrail_verdict",
]

BREAKER_REASON = "circuit breaker:"  # how a hold by the breaker reads: the queue for room is found by it


@dataclass(frozen=True)
class MaintenanceWindow:
    """Daily window [start, end) in UTC; `mode` hold = playbooks wait during it, allow = only during it."""

    start: time
    end: time
    mode: str = "hold"

    def contains(self, now: datetime) -> bool:
        t = now.time().replace(tzinfo=None)
        if self.start <= self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end


@dataclass(frozen=True)
class GuardrailFacts:
    now: datetime
    paused: bool
    node: str | None
    node_excluded: bool
    quarantines: bool
    quarantined_nodes: frozenset[str]
    limit_nodes: int
    gpu_nodes: int
    recent_quarantine_starts: int
    rate_limit: int
    flapping: bool = False
    node_recent_remediations: int = 0
    # Why it is paused when a scoped pause holds it (domain/pauses.py: who, why, until), not the kill switch.
    pause_reason: str | None = None
    node_repeat_limit: int = 0
    windows: Sequence[MaintenanceWindow] = field(default_factory=tuple)
    # A human released this remediation past the flapping / repeat-offender holds.
    override: bool = False
    # Nodes the circuit breaker holds remediations for that came before this one: room goes to them first.
    queued_ahead: int = 0
    # The node shares the suspected cause of an open storm (engine/storm_guard.py): why it waits for the group.
    storm_reason: str | None = None


class QuarantineLimitRule(Protocol):
    def resolve(self, gpu_nodes: int) -> int: ...


class GuardrailSettings(Protocol):
    """The settings the guardrails read (remediator/settings.py `Settings` is one), named here so that the
    domain builds the facts without importing the settings module."""

    @property
    def quarantine_limit(self) -> QuarantineLimitRule: ...
    @property
    def quarantine_rate(self) -> int: ...
    @property
    def node_repeat_limit(self) -> int: ...
    @property
    def windows(self) -> Sequence[tuple[time, time, str]]: ...


@dataclass(frozen=True)
class FleetState:
    """The fleet as an admission finds it: read under the admission lock by the engine, assumed by the offline
    tools (`remediator simulate`: an empty fleet; `remediator test`: the test's `fleet`)."""

    quarantined_nodes: frozenset[str] = frozenset()
    gpu_nodes: int = 0
    recent_quarantine_starts: int = 0
    queued_ahead: int = 0
    limit_nodes: int | None = None  # a limit other than the settings' (a playbook test's fleet)


def guardrail_facts(
    settings: GuardrailSettings, *, now: datetime, node: str | None, node_excluded: bool, quarantines: bool,
    fleet: FleetState, paused: bool = False, pause_reason: str | None = None, flapping: bool = False,
    node_recent_remediations: int = 0, override: bool = False, storm_reason: str | None = None,
) -> GuardrailFacts:
    """The one builder of `GuardrailFacts`: the admission, `remediator test` and `remediator simulate` all
    build them here, so the limits, the rate, the repeat limit and the maintenance windows come from the settings
    the same way everywhere. A new guardrail adds its fact here and its rule to `guardrail_verdict`."""
    limit = fleet.limit_nodes if fleet.limit_nodes is not None else settings.quarantine_limit.resolve(fleet.gpu_nodes)
    return GuardrailFacts(
        now=now, paused=paused, pause_reason=pause_reason, node=node, node_excluded=node_excluded,
        quarantines=quarantines, quarantined_nodes=fleet.quarantined_nodes, limit_nodes=limit,
        gpu_nodes=fleet.gpu_nodes, recent_quarantine_starts=fleet.recent_quarantine_starts,
        rate_limit=settings.quarantine_rate, flapping=flapping, node_recent_remediations=node_recent_remediations,
        node_repeat_limit=settings.node_repeat_limit,
        windows=tuple(MaintenanceWindow(a, b, mode) for a, b, mode in settings.windows),
        override=override, queued_ahead=fleet.queued_ahead, storm_reason=storm_reason,
    )


@dataclass(frozen=True)
class Verdict:
    allow: bool
    name: str
    reason: str
    quarantines: bool = False


def _window_verdict(facts: GuardrailFacts) -> Verdict | None:
    holds = [w for w in facts.windows if w.mode == "hold"]
    allows = [w for w in facts.windows if w.mode == "allow"]
    if any(w.contains(facts.now) for w in holds):
        return Verdict(False, "maintenance", "inside a maintenance window in which playbooks are held")
    if allows and not any(w.contains(facts.now) for w in allows):
        return Verdict(False, "maintenance", "outside the maintenance windows in which playbooks may run")
    return None


def guardrail_verdict(facts: GuardrailFacts) -> Verdict:
    """May this remediation start now? The first guardrail that says no gives the reason."""
    if facts.paused:
        return Verdict(False, "paused", facts.pause_reason or "controller is paused (POST /api/v1/resume to continue)")
    if facts.node_excluded:
        return Verdict(False, "opt_out", f"node {facts.node} is labelled {EXCLUDE_LABEL}=true")
    window = _window_verdict(facts)
    if window is not None:
        return window
    if facts.flapping and not facts.override:
        return Verdict(False, "flapping", "alert is flapping on this target; held for a human")
    if (
        not facts.override
        and facts.node_repeat_limit
        and facts.node_recent_remediations >= facts.node_repeat_limit
    ):
        return Verdict(
            False, "repeat_offender",
            f"node {facts.node} was remediated {facts.node_recent_remediations} times recently; held for a human",
        )
    if facts.storm_reason and not facts.override:
        return Verdict(False, "storm", facts.storm_reason)
    if facts.quarantines:
        already = facts.node is not None and facts.node in facts.quarantined_nodes
        if not already and len(facts.quarantined_nodes) >= facts.limit_nodes:
            return Verdict(
                False, "circuit_breaker",
                f"{BREAKER_REASON} {len(facts.quarantined_nodes)} of at most {facts.limit_nodes} nodes "
                f"already quarantined ({facts.gpu_nodes} GPU nodes)",
            )
        if not already and len(facts.quarantined_nodes) + facts.queued_ahead >= facts.limit_nodes:
            return Verdict(  # room is free, but held remediations that came first take it, oldest first
                False, "circuit_breaker",
                f"{BREAKER_REASON} {len(facts.quarantined_nodes)} of at most {facts.limit_nodes} nodes "
                f"quarantined and {facts.queued_ahead} held before this one wait for the room "
                f"({facts.gpu_nodes} GPU nodes)",
            )
        if not already and facts.rate_limit and facts.recent_quarantine_starts >= facts.rate_limit:
            return Verdict(
                False, "rate_limit",
                f"rate limit: {facts.recent_quarantine_starts} quarantines started in the current window",
            )
    return Verdict(True, "ok", "guardrails allow", quarantines=facts.quarantines)

"""The escalation ladder: reset -> reboot -> replace, per GPU (UUID) and node.

A GPU that does not heal must not cycle through the same remedy forever. Two things move it one rung up
the ladder (ESCALATION_LADDER, default `reset-gpu,reboot-node,rma-gpu`):

- its validation gate fails (a `validate_gpu` step of the playbook, or a step of its `return_gate`): the
  node stays quarantined and the next rung starts at once for the same alert;
- it faults again within RECURRENCE_WINDOW (default 24 h) after a remediation on the ladder returned it to
  service: the new alert starts the rung after the one that "succeeded", not the rule's own playbook when
  that is the same rung or a lower one.

The new remediation's plan carries `escalation` (where it came from, why, its rung, the fault history of
the GPU and the failed gate's results); the `rma-gpu` playbook renders its RMA summary from it, and the
effectiveness report reads it to tell an escalation from a first run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from remediator.definitions import DefinitionSet
from remediator.engine.planning import Proposal, target_for
from remediator.engine.runtime import Runtime
from remediator.engine.versions import persist_version, versions_for
from remediator.intake.normalize import GpuAlert
from remediator.store.models import Remediation
from remediator.store.repository import NewRemediation

__all__ = [
    "Ladder",
    "fault_history",
    "new_remediation",
    "remediation_plan",
    "returned_at",
    "rung",
    "same_subject",
    "utc",
]

log = logging.getLogger(__name__)
RECURRENCE_WINDOWS: tuple[tuple[str, timedelta], ...] = (("24h", timedelta(hours=24)), ("7d", timedelta(days=7)))
HISTORY_ROWS = 50


def rung(ladder: Sequence[str], playbook: str) -> int | None:
    """The 1-based position of `playbook` on the ladder, or None when it is not on it."""
    return ladder.index(playbook) + 1 if playbook in ladder else None


def gpu_of(rem: Remediation) -> str | None:
    """The GPU a remediation was about (a node target keeps the alert's GPU in its plan)."""
    return rem.gpu_uuid or (rem.plan.get("alert") or {}).get("gpu_uuid")


def same_subject(rem: Remediation, node: str | None, gpu_uuid: str | None) -> bool:
    """Was `rem` about the same GPU (both name a UUID), else about the same node?"""
    theirs = gpu_of(rem)
    if gpu_uuid and theirs:
        return theirs == gpu_uuid
    return rem.node == node


def utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; the store writes UTC, so say so."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def returned_at(rem: Remediation) -> datetime | None:
    """When the remediation gave its target back to service: reverted, or succeeded without a quarantine."""
    if rem.finished_at is not None and (rem.state == "reverted" or (rem.state == "succeeded" and not rem.quarantined)):
        return utc(rem.finished_at)
    return None


def fault_history(rems: Iterable[Remediation]) -> list[dict[str, Any]]:
    """Oldest first: when each fault came, its alert and Xid, what ran and how it ended."""
    rows = []
    for rem in sorted(rems, key=lambda r: utc(r.created_at)):
        xid = (rem.plan.get("xid") or {}).get("code")
        rows.append({
            "at": utc(rem.created_at).isoformat(), "alertname": rem.alertname, "xid": xid, "gpu": gpu_of(rem),
            "playbook": rem.playbook, "outcome": rem.state, "remediation": rem.id,
        })
    return rows[-HISTORY_ROWS:]


def remediation_plan(
    proposal: Proposal, alert: GpuAlert, defs: DefinitionSet, xid: Mapping[str, Any],
    *, escalation: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The snapshot a remediation runs from (its playbook, alert, Xid facts, definition versions)."""
    plan: dict[str, Any] = {
        "playbook": proposal.playbook.model_dump(mode="json"),
        "alert": asdict(alert),
        "xid": dict(xid),
        "require_approval": proposal.require_approval,
        # The rule's cooldown, so "why did nothing happen?" can say when a suppressed alert would act again.
        "cooldown_seconds": proposal.cooldown.total_seconds() if proposal.cooldown else None,
        "versions": versions_for(defs, proposal.rule_name, proposal.playbook.name),
    }
    if escalation is not None:
        plan["escalation"] = dict(escalation)
    return plan


def new_remediation(proposal: Proposal, defs: DefinitionSet, plan: dict[str, Any]) -> NewRemediation:
    target = proposal.target
    return NewRemediation(
        rule=proposal.rule_name, playbook=proposal.playbook.name, definitions_version=defs.version,
        target_kind=target.kind, target_key=target.key, node=target.node, gpu_uuid=target.gpu_uuid,
        gpu_index=target.gpu_index, namespace=target.namespace, pod=target.pod, params=proposal.params, plan=plan,
        cooldown=proposal.cooldown,
    )


class Ladder:
    """Moves a GPU up the ladder on a failed gate or a recurrence (needs the store and the definitions)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    @property
    def steps(self) -> list[str]:
        return list(self.rt.settings.escalation_ladder)

    async def on_recurrence(self, alert: GpuAlert, proposal: Proposal) -> tuple[Proposal, dict[str, Any]] | None:
        """The next rung's proposal, with its `escalation` record, when this fault recurs within the window
        after a ladder remediation returned the GPU (or node) to service; None when the rule's own stands."""
        ladder = self.steps
        asked = rung(ladder, proposal.playbook.name)
        if asked is None or not alert.node:
            return None
        now = utc(self.rt.repo._clock())
        window = self.rt.settings.recurrence_window
        longest = max(window, *(w for _, w in RECURRENCE_WINDOWS))
        history = await self.rt.repo.node_history(alert.node, since=now - longest - timedelta(days=1))
        back = [
            (at, r) for r in history
            if same_subject(r, alert.node, alert.gpu_uuid) and (at := returned_at(r)) is not None and at <= now
        ]
        if not back:
            return None
        at, previous = max(back, key=lambda pair: pair[0])
        self._count_recurrence(previous, now - at)
        was = rung(ladder, previous.playbook)
        if now - at <= window:
            self.rt.metrics.remediation_outcomes.labels(playbook=previous.playbook, outcome="recurred").inc()
        if now - at > window or was is None or was < asked:
            return None
        target_rung = min(was + 1, len(ladder))
        escalation = {
            "from": previous.id, "reason": "recurrence", "rung": target_rung, "ladder": ladder,
            "recurrence_seconds": (now - at).total_seconds(),
            "history": fault_history(r for r in history if same_subject(r, alert.node, alert.gpu_uuid)),
            "gate": None,
        }
        escalated = self._proposal(ladder[target_rung - 1], alert, "escalation:recurrence")
        return None if escalated is None else (escalated, escalation)

    async def after_failed_gate(self, rem: Remediation, gate: Mapping[str, Any] | None, why: str) -> str | None:
        """Start the next rung for a remediation whose GPU failed its gate; its id, or None at the top."""
        ladder = self.steps
        was = rung(ladder, rem.playbook)
        if was is None:
            return None
        if was >= len(ladder):
            log.warning("remediation %s failed its gate on the last rung (%s): it stays quarantined", rem.id,
                        rem.playbook)
            return None
        alert = GpuAlert(**rem.plan["alert"])
        proposal = self._proposal(ladder[was], alert, "escalation:gate-failed")
        if proposal is None:
            return None
        history = await self.rt.repo.node_history(rem.node) if rem.node else [rem]
        escalation = {
            "from": rem.id, "reason": "gate_failed", "rung": was + 1, "ladder": ladder, "recurrence_seconds": None,
            "history": fault_history(r for r in history if same_subject(r, rem.node, gpu_of(rem))),
            "gate": dict(gate or {}), "why": why,
        }
        defs = self.rt.definitions.current
        plan = remediation_plan(proposal, alert, defs, rem.plan.get("xid") or {}, escalation=escalation)
        await persist_version(self.rt.repo, self.rt.definitions, defs)
        outcome, new_id = await self.rt.repo.create_escalation(
            rem, new_remediation(proposal, defs, plan), f"escalated from {rem.playbook}: {why}"[:2000]
        )
        if outcome == "started":
            self.rt.metrics.remediation_outcomes.labels(playbook=rem.playbook, outcome="escalated").inc()
        return new_id

    def _proposal(self, playbook_name: str, alert: GpuAlert, rule: str) -> Proposal | None:
        playbook = self.rt.definitions.current.playbooks.get(playbook_name)
        if playbook is None:
            log.warning("escalation ladder names playbook %r, which is not loaded: no escalation", playbook_name)
            return None
        return Proposal(
            rule_name=rule, playbook=playbook, params=dict(playbook.params),
            target=target_for(playbook.target, alert), cooldown=None, require_approval=False,
        )

    def _count_recurrence(self, previous: Remediation, after: timedelta) -> None:
        counter = self.rt.metrics.recurrences
        xid = (previous.plan.get("xid") or {}).get("code")
        model = (previous.plan.get("alert") or {}).get("model") or ""
        for name, window in RECURRENCE_WINDOWS:
            if after <= window:
                counter.labels(playbook=previous.playbook, xid="" if xid is None else str(xid), model=model,
                               window=name).inc()

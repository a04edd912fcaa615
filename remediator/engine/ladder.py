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
from collections.abc import Mapping

from remediator.definitions import DefinitionSet
from remediator.definitions.derived import derived
from remediator.domain.json_values import JsonObject
from remediator.domain.plan_snapshot import (
    Escalation,
    RemediationPlan,
    XidFacts,
    plan_json,
    plan_of,
    stored_alert_field,
    stored_xid_code,
)
from remediator.engine.decision import (
    RECURRENCE_WINDOWS,
    Recurrence,
    fault_history,
    gpu_of,
    ladder_proposal,
    returned_at,
    rung,
    same_subject,
)
from remediator.engine.planning import Proposal
from remediator.engine.runtime import Runtime
from remediator.engine.versions import persist_version, versions_for
from remediator.intake.normalize import GpuAlert
from remediator.process.metrics import Metrics
from remediator.store.models import Remediation
from remediator.store.repository import NewRemediation

__all__ = [
    "Ladder",
    "count_recurrence",
    "fault_history",
    "log_escalation",
    "new_remediation",
    "remediation_plan",
    "returned_at",
    "rung",
    "same_subject",
]

log = logging.getLogger(__name__)


def remediation_plan(
    proposal: Proposal, alert: GpuAlert, defs: DefinitionSet, xid: Mapping[str, object],
    *, escalation: Mapping[str, object] | None = None,
) -> JsonObject:
    """The snapshot a remediation runs from (its playbook, alert, Xid facts, definition versions), as stored."""
    plan = RemediationPlan(
        playbook=proposal.playbook, alert=alert, xid=XidFacts.model_validate(xid),
        require_approval=proposal.require_approval,
        cooldown_seconds=proposal.cooldown.total_seconds() if proposal.cooldown else None,
        versions=versions_for(defs, proposal.rule_name, proposal.playbook.name),
        escalation=Escalation.model_validate(escalation) if escalation is not None else None,
    )
    playbook = derived(proposal.playbook, "json", lambda: proposal.playbook.model_dump(mode="json"))
    return plan_json(plan, playbook)


def new_remediation(proposal: Proposal, defs: DefinitionSet, plan: JsonObject) -> NewRemediation:
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

    async def after_failed_gate(self, rem: Remediation, gate: Mapping[str, object] | None, why: str) -> str | None:
        """Start the next rung for a remediation whose GPU failed its gate; its id, or None at the top."""
        ladder = self.steps
        was = rung(ladder, rem.playbook)
        if was is None:
            return None
        if was >= len(ladder):
            log.warning("remediation %s failed its gate on the last rung (%s): it stays quarantined", rem.id,
                        rem.playbook)
            return None
        stored = plan_of(rem)
        alert = stored.alert
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
        plan = remediation_plan(proposal, alert, defs, stored.xid_json, escalation=escalation)
        await persist_version(self.rt.repo, self.rt.definitions, defs)
        outcome, new_id = await self.rt.repo.create_escalation(
            rem, new_remediation(proposal, defs, plan), f"escalated from {rem.playbook}: {why}"[:2000]
        )
        if outcome == "started":
            self.rt.metrics.remediation_outcomes.labels(playbook=rem.playbook, outcome="escalated").inc()
            log_escalation(rem.playbook, proposal.playbook.name, node=rem.node, gpu=gpu_of(rem),
                           from_id=rem.id, new_id=new_id, why=f"gate failed: {why}")
        return new_id

    def _proposal(self, playbook_name: str, alert: GpuAlert, rule: str) -> Proposal | None:
        proposal = ladder_proposal(self.rt.definitions.current, playbook_name, alert, rule)
        if proposal is None:
            log.warning("escalation ladder names playbook %r, which is not loaded: no escalation", playbook_name)
        return proposal


def log_escalation(
    was: str, now: str, *, node: str | None, gpu: str | None, from_id: str, new_id: str | None, why: str
) -> None:
    """One WARNING line per climb of the ladder (reset -> reboot -> replace), naming the node and the GPU, so an
    on-call reading the controller's log sees each escalation without opening the remediation."""
    log.warning(
        "escalation: %s -> %s on node %s GPU %s (remediation %s -> %s): %s",
        was, now, node or "-", gpu or "-", from_id, new_id or "a new one", why,
    )


def count_recurrence(metrics: Metrics, found: Recurrence) -> None:
    """A fault came back after a ladder remediation returned its GPU: the recurrence metrics (both windows),
    and `recurred` for the remediation that did not hold when it came back within RECURRENCE_WINDOW."""
    previous = found.previous
    xid = stored_xid_code(previous.plan)
    model = stored_alert_field(previous.plan, "model") or ""
    for name, window in RECURRENCE_WINDOWS:
        if found.after <= window:
            metrics.recurrences.labels(playbook=previous.playbook, xid="" if xid is None else str(xid), model=model,
                                       window=name).inc()
    if found.within_window:
        metrics.remediation_outcomes.labels(playbook=previous.playbook, outcome="recurred").inc()

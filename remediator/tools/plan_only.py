"""One alert through the definitions, plan-only: the shared core of playbook tests and replay.

It strings together the functions the worker and `remediator simulate` use (remediator.engine.planning:
`propose`, `build_variables`, `plan_steps`; remediator.domain.guardrails: `guardrail_verdict`), so a test or a replay
shows what the controller itself would plan. Nothing here reads a cluster or writes a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from remediator.definitions import DefinitionSet
from remediator.domain.json_values import jsonable
from remediator.engine.planning import (
    PlannedStep,
    Proposal,
    build_variables,
    plan_steps,
    quarantines,
    xid_variables,
)
from remediator.intake.normalize import GpuAlert

__all__ = ["AlertPlan", "jsonable", "plan_proposal", "quarantines", "step_view"]


@dataclass(frozen=True)
class AlertPlan:
    """A matched proposal with its steps rendered against one context."""

    proposal: Proposal
    variables: dict[str, Any]
    steps: list[PlannedStep] = field(default_factory=list)


def plan_proposal(
    proposal: Proposal,
    alert: GpuAlert,
    defs: DefinitionSet,
    context: Mapping[str, Any],
    outputs: Mapping[str, Any] | None = None,
    *,
    escalation: Mapping[str, Any] | None = None,
) -> AlertPlan:
    """Render the proposal's playbook; `outputs` are earlier steps' outputs by step name, when known."""
    variables = build_variables(
        alert=alert, target=proposal.target, params=proposal.params, context=context, steps=outputs or {},
        xid=xid_variables(alert, defs, None), escalation=escalation,
    )
    steps = plan_steps(proposal.playbook, variables, require_approval=proposal.require_approval)
    return AlertPlan(proposal, variables, steps)


def step_view(step: PlannedStep) -> dict[str, Any]:
    """A planned step as plain data: what runs, with which rendered parameters."""
    view: dict[str, Any] = {"name": step.name, "action": step.action, "runs": step.runs}
    if step.runs:
        view["params"] = jsonable(step.params)
        if step.approval:
            view["approval"] = True
    if step.note:
        view["note"] = step.note
    return view

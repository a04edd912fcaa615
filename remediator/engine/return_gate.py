"""What must happen before a node or GPU returns to service, said before it matters.

A playbook's `return_gate` runs when its remediation is undone (the alert resolved, a revert, a person's return):
for `reboot-node` the node must first run a new boot, then every GPU must pass the validation gate. Until now a
person learnt that only when the gate failed. `describe`, `simulate`, the remediation page and the approval page
show it from the start, from the same playbook snapshot and variables the executor renders the gate with.

Rendering never fails the view: a parameter that cannot be rendered or parsed yet (a context key a plan-only
run does not carry, an output not there yet) leaves that step in general words for its kind (`wait for the
node to run a new boot`), never a template error. Pure apart from the action registry it is given.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from remediator.actions.base import AnyAction, Target
from remediator.definitions import Playbook
from remediator.definitions.templates import render_params
from remediator.domain.json_values import JsonObject
from remediator.domain.plan_snapshot import plan_of, playbook_of
from remediator.domain.returns import gate_step_kind
from remediator.engine.planning import build_variables, target_of
from remediator.store.models import Remediation, StepRow

__all__ = ["NVML_CHECKS", "GateStep", "gate_summary", "return_gate", "stored_gate"]

# The node agent's NVML checks of the validation gate (remediator/sidecar/validation.py says each one's limit).
log = logging.getLogger(__name__)

NVML_CHECKS = ("present", "remapped rows and retired pages", "uncorrected ECC", "PCIe width and generation",
               "clock events", "recovery action", "temperature margin")


@dataclass(frozen=True)
class GateStep:
    """One return-gate step in words: `kind` is `reboot`, `validation` or None (another gate step)."""

    index: int
    name: str
    action: str
    kind: str | None
    says: str
    status: str | None = None  # a stored remediation's gate step row: running, succeeded, failed, skipped, ...

    def as_dict(self) -> JsonObject:
        return {"index": self.index, "name": self.name, "action": self.action, "kind": self.kind, "says": self.says,
                "status": self.status}


def _validation_words(params: Mapping[str, object], target: Target) -> str:
    gpu = params.get("gpu")
    which = ("every GPU of the node" if gpu == "all" else f"GPU {gpu}" if gpu
             else f"GPU {target.gpu_uuid or target.gpu_index}" if target.gpu_uuid or target.gpu_index
             else "the remediation's GPU")
    level = params.get("dcgm_level", 1)
    dcgm = (f"DCGM diagnostic level {level} (required)" if params.get("require_dcgm")
            else f"DCGM diagnostic level {level} where DCGM is installed")
    margin = params.get("temperature_margin_c", 10)
    checks = ", ".join(c if c != "temperature margin" else f"temperature margin {margin} °C" for c in NVML_CHECKS)
    return f"validate {which}: NVML checks ({checks}) and {dcgm}; a GPU that fails keeps the quarantine"


def _general(kind: str | None, action: str) -> str:
    if kind == "reboot":
        return "wait for the node to run a new boot (a boot ID other than the one recorded at quarantine) and " \
               "report Ready"
    if kind == "validation":
        return f"validate the GPUs ({action}); a GPU that fails keeps the quarantine"
    return f"run {action}"


def _parsed(action: AnyAction, raw: Mapping[str, object], variables: Mapping[str, object]) -> BaseModel | None:
    """The step's parameters rendered and parsed, or None when they cannot be yet."""
    try:
        parsed: BaseModel = action.parse(render_params(raw, variables))
        return parsed
    # broad: rendering and parsing run templates and the action's model on stored data; any failure means the parameters
    # are not known yet
    except Exception as exc:
        log.debug("return gate parameters not known yet: %s", exc)
        return None


def return_gate(
    actions: Mapping[str, AnyAction], playbook: Playbook, variables: Mapping[str, object], target: Target,
) -> list[GateStep]:
    """The playbook's return gate, step by step, in words (empty when it has none)."""
    out: list[GateStep] = []
    for index, step in enumerate(playbook.return_gate):
        action = actions.get(step.action)
        kind = gate_step_kind(step.action, bool(getattr(action, "gate", False)))
        params = _parsed(action, step.params, variables) if action is not None else None
        if params is None or action is None:  # not known yet: the step's general words stand
            says = _general(kind, step.action)
        elif kind == "validation":
            says = _validation_words(params.model_dump(), target)
        else:
            says = action.describe(target, params)
        out.append(GateStep(index, step.name, step.action, kind, says))
    return out


def stored_gate(actions: Mapping[str, AnyAction], rem: Remediation, rows: list[StepRow]) -> list[GateStep]:
    """The return gate of a stored remediation, from its playbook snapshot and the variables the executor renders
    its gate with (the forward steps' outputs so far), each step with the status of its row once it ran."""
    plan = plan_of(rem)
    try:
        playbook = playbook_of(rem)
    except Exception:  # a snapshot that no longer parses: nothing to say rather than a broken page
        return []
    outputs = {r.name: r.output for r in rows if r.phase == "forward" and r.status == "succeeded"}
    variables = build_variables(
        alert=plan.alert, target=target_of(rem), params=rem.params, context=rem.context, steps=outputs,
        xid=plan.xid_json, escalation=plan.escalation_json,
    )
    status = {r.name: r.status for r in rows if r.phase == "revert"}
    return [GateStep(s.index, s.name, s.action, s.kind, s.says, status.get(f"gate:{s.name}"))
            for s in return_gate(actions, playbook, variables, target_of(rem))]


def gate_summary(steps: list[GateStep]) -> str:
    """`first wait for ...; then validate ...`, or what returns without a gate."""
    if not steps:
        return "no return gate: the undo runs as soon as the return starts"
    return "; then ".join(s.says for s in steps)

"""From a normalised alert to a plan: which rule, which playbook, which steps with which parameters.

Shared by the worker (to create a remediation), `remediator simulate` and playbook tests, so a plan shown to
an SRE is computed by exactly the code that will run it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from remediator.actions.base import AnyAction, Target
from remediator.definitions import DefinitionSet, Playbook
from remediator.definitions.derived import derived
from remediator.definitions.matching import RuleIndex
from remediator.definitions.xid import recovery_action_from_message
from remediator.domain.plan_snapshot import plan_of
from remediator.domain.xid_decode import decoded_action
from remediator.engine.gpu_instance import instance_of
from remediator.engine.step_stages import applies, approval_required, render
from remediator.intake.normalize import GpuAlert

if TYPE_CHECKING:
    from remediator.store.models import Remediation, StepRow

__all__ = [
    "EMPTY_ESCALATION", "PlannedStep", "Proposal", "approval_required", "build_variables", "forward_outputs",
    "match_labels", "pending_step", "plan_steps", "propose", "quarantines", "stored_variables", "target_for",
    "target_of", "waiting_note", "xid_action", "xid_message",
]


@dataclass(frozen=True)
class Proposal:
    """A matched rule and its playbook for one alert (nothing rendered yet)."""

    rule_name: str
    playbook: Playbook
    params: dict[str, Any]
    target: Target
    cooldown: timedelta | None
    require_approval: bool


@dataclass
class PlannedStep:
    index: int
    name: str
    action: str
    params: dict[str, Any] = field(default_factory=dict)
    runs: bool = True
    note: str = ""
    approval: bool = False
    # The earlier step whose output this step's parameters (or condition) read: until that step has run,
    # they cannot be known, and a preview says so instead of showing a template error.
    waits_for: str | None = None


_STEP_REF = re.compile(r"""\bsteps\s*(?:\.\s*([A-Za-z_]\w*)|\[\s*['"]([^'"]+)['"]\s*\])""")


def pending_step(source: Any, playbook: Playbook, done: Mapping[str, Any]) -> str | None:
    """The first playbook step named in `source` (params or a condition) that has no output yet."""
    names = {s.name for s in playbook.steps}
    for match in _STEP_REF.finditer(str(source)):
        name = match.group(1) or match.group(2)
        if name in names and name not in done:
            return name
    return None


def waiting_note(step_name: str) -> str:
    return f"decided after step `{step_name}` runs"


TargetKind = Literal["node", "gpu", "gpu_instance", "namespace"]
_KINDS: tuple[TargetKind, ...] = ("node", "gpu", "gpu_instance", "namespace")
# The GPU instance at the end of a `gpu_instance` target's key (Target.key: gpu_instance:<node>/<gpu>/gi<N>).
_INSTANCE_KEY = re.compile(r"/gi([0-9]+)\Z")


def _kind(value: str) -> TargetKind:
    return next((k for k in _KINDS if k == value), "node")


def target_for(kind: str, alert: GpuAlert) -> Target:
    """The target a playbook of target kind `kind` acts on for `alert`. A `gpu_instance` playbook targets the
    MIG GPU instance the alert names (label `gpu_instance`), so each instance of a GPU is its own target (its
    own active remediation, its own cooldown); an alert that names no instance targets the whole GPU."""
    wanted = _kind(kind)
    gpu_instance = instance_of(alert.labels) if wanted == "gpu_instance" else None
    if wanted == "gpu_instance" and gpu_instance is None:
        wanted = "gpu"
    return Target(
        kind=wanted,
        node=alert.node,
        gpu_uuid=alert.gpu_uuid,
        gpu_index=alert.gpu_index,
        namespace=alert.namespace,
        pod=alert.pod,
        gpu_instance=gpu_instance,
    )


def target_of(rem: Any) -> Target:
    """The target a stored remediation acts on (its row's columns; a GPU instance from its key); live runs and
    replays read it alike."""
    kind = _kind(rem.target_kind)
    gpu_instance = None
    if kind == "gpu_instance":
        found = _INSTANCE_KEY.search(str(rem.target_key))
        if found is None:
            raise ValueError(f"target key {rem.target_key!r} of a gpu_instance target names no GPU instance")
        gpu_instance = int(found.group(1))
    return Target(
        kind=kind, node=rem.node, gpu_uuid=rem.gpu_uuid, gpu_index=rem.gpu_index, namespace=rem.namespace,
        pod=rem.pod, gpu_instance=gpu_instance,
    )


def propose(alert: GpuAlert, defs: DefinitionSet) -> Proposal | None:
    """The highest-priority enabled rule that matches, with its playbook; None when nothing matches."""
    index = derived(defs, "rule_index", lambda: RuleIndex(defs.rules))
    matches = index.match(match_labels(alert, defs))
    if not matches:
        return None
    match = matches[0]
    playbook = defs.playbooks[match.rule.playbook]
    params = {**playbook.params, **match.params}
    return Proposal(
        rule_name=match.rule.name,
        playbook=playbook,
        params=params,
        target=target_for(playbook.target, alert),
        cooldown=match.rule.cooldown,
        require_approval=match.rule.require_approval,
    )


# Where an Xid's message text reaches the controller: dcgm-exporter's `err_msg` (3.3.6+), kept by the shipped
# rules for the codes that need it, or an annotation a site's rule fills.
_MESSAGE_KEYS = ("err_msg", "xid_message", "message")


def xid_message(alert: GpuAlert) -> str:
    """The Xid's message text the alert carries (a label, else an annotation), or ""."""
    for source in (alert.labels, alert.annotations):
        for key in _MESSAGE_KEYS:
            if source.get(key):
                return str(source[key])
    return ""


def xid_action(alert: GpuAlert, defs: DefinitionSet) -> str | None:
    """The immediate action of an Xid alert: the `xid_action` label when the source decoded it (the node
    detector), else NVIDIA's decode of the message (45, 74, 144-150, 154), else the catalog's bucket."""
    if alert.xid is None:
        return None
    given = alert.labels.get("xid_action")
    if given:
        return given
    return decoded_action(alert.xid, xid_message(alert)) or defs.xid.lookup(alert.xid).resolution


def match_labels(alert: GpuAlert, defs: DefinitionSet) -> Mapping[str, str]:
    """The labels rules are matched against: the alert's, with `xid_action` (see `xid_action`) on Xid alerts."""
    action = xid_action(alert, defs)
    if action is None or alert.labels.get("xid_action") == action:
        return alert.labels
    return {**alert.labels, "xid_action": action}


def xid_variables(alert: GpuAlert, defs: DefinitionSet | None, xid_facts: Mapping[str, Any] | None) -> dict[str, Any]:
    if xid_facts is not None:
        return dict(xid_facts)
    empty: dict[str, Any] = {"code": None, "resolution": None, "cause": None, "description": None,
                             "recovery_action": None, "action": None, "nvidia": None}
    if alert.xid is None or defs is None:
        return empty
    info = defs.xid.lookup(alert.xid)
    message = " ".join(str(v) for v in alert.annotations.values())
    return {
        "code": alert.xid,
        "resolution": info.resolution,
        "cause": info.cause,
        "description": info.description,
        "recovery_action": recovery_action_from_message(message),
        "action": xid_action(alert, defs),
        "nvidia": info.nvidia,
    }


# What `escalation` holds for a remediation that is not an escalation (a first run).
EMPTY_ESCALATION: dict[str, Any] = {
    "from": None, "reason": None, "rung": None, "ladder": [], "recurrence_seconds": None, "history": [],
    "gate": None,
}


def build_variables(
    *,
    alert: GpuAlert,
    target: Target,
    params: Mapping[str, Any],
    context: Mapping[str, Any],
    steps: Mapping[str, Any],
    xid: Mapping[str, Any],
    escalation: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The names templates and CEL conditions see (documented in remediator/definitions/variables.py)."""
    labels = dict(alert.labels)
    annotations = dict(alert.annotations)
    return {
        "alert": {
            "name": alert.alertname,
            "status": alert.status,
            "kind": alert.kind,
            "labels": labels,
            "annotations": annotations,
            "starts_at": alert.starts_at,
            "fingerprint": alert.fingerprint,
            "summary": annotations.get("summary") or annotations.get("description") or alert.alertname,
        },
        "gpu": {
            "uuid": alert.gpu_uuid,
            "index": alert.gpu_index,
            "pci_bus_id": alert.pci_bus_id,
            "model": alert.model,
            "device": alert.device,
        },
        "node": {"name": alert.node},
        "xid": dict(xid),
        "context": dict(context),
        "params": dict(params),
        "steps": dict(steps),
        "escalation": {**EMPTY_ESCALATION, **(escalation or {})},
        "target": {
            "kind": target.kind,
            "key": target.key,
            "node": target.node,
            "gpu_uuid": target.gpu_uuid,
            "gpu_instance": target.gpu_instance,
            "namespace": target.namespace,
        },
    }


def forward_outputs(rows: Iterable[StepRow]) -> dict[str, Any]:
    """What the forward steps that succeeded found, by step name (the `steps` variable)."""
    return {r.name: r.output for r in rows if r.phase == "forward" and r.status == "succeeded"}


def stored_variables(rem: Remediation, rows: Iterable[StepRow]) -> dict[str, Any]:
    """The variables of a stored remediation's templates: its plan's alert, Xid facts and escalation, its target,
    parameters and context, and its steps' outputs. The executor renders its steps from these, the approval
    page previews them and `replay` shows them: one builder, so the three never disagree."""
    plan = plan_of(rem)
    return build_variables(
        alert=plan.alert, target=target_of(rem), params=rem.params, context=rem.context,
        steps=forward_outputs(rows), xid=plan.xid_json, escalation=plan.escalation_json,
    )


def quarantines(playbook: Playbook, actions: Mapping[str, AnyAction]) -> bool:
    """Does the playbook put its node under quarantine (and so count toward the circuit breaker)?"""
    return any(getattr(actions.get(step.action), "quarantines", False) for step in playbook.steps)


def plan_steps(
    playbook: Playbook, variables: Mapping[str, Any], *, require_approval: bool = False
) -> list[PlannedStep]:
    """Render every step the way the executor would: the lifecycle's pure stages (engine/step_stages.py: applies,
    render) over each step in order, with what a preview says where a stage cannot be known yet."""
    planned: list[PlannedStep] = []
    done = variables.get("steps") or {}
    for index, step in enumerate(playbook.steps):
        approval = approval_required(step, index, require_approval)
        try:
            runs = applies(step, variables)
        except Exception as exc:  # the applies stage failed: the preview says why (or what it waits for)
            waits = pending_step(step.when, playbook, done)
            note = waiting_note(waits) if waits else f"condition error: {exc}"
            planned.append(PlannedStep(index, step.name, step.action, runs=False, note=note, approval=approval,
                                       waits_for=waits))
            continue
        if not runs:
            planned.append(PlannedStep(index, step.name, step.action, runs=False, note=f"skipped: when {step.when}"))
            continue
        try:
            params = render(step.params, variables)
        except Exception as exc:  # the render stage failed: the preview says why (or what it waits for)
            waits = pending_step(step.params, playbook, done)
            note = waiting_note(waits) if waits else f"template error: {exc}"
            planned.append(PlannedStep(index, step.name, step.action, runs=False, note=note, approval=approval,
                                       waits_for=waits))
            continue
        planned.append(PlannedStep(index, step.name, step.action, params=params, approval=approval))
    return planned

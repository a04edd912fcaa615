"""What a person's move on one remediation will do, said before it is done.

The web UI's remediation page offers approve, reject, cancel, release, revert and return only where the state
machine allows them (and return only while the remediation still holds its node or GPU), and asks for a
confirmation that names what will happen. The words come from the same plan the executor runs: the undo of
every forward step that changed something (`return_to_service.revert_plan`, newest first) after the playbook's return
gate, with the gate steps a return skips said as skipped; so the confirmation names the taint, the cordon and
the labels that will actually be removed, not a generic sentence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from remediator.actions.node import DEFAULT_TAINT_KEY
from remediator.definitions.models import Step
from remediator.domain.plan_snapshot import playbook_of
from remediator.domain.returns import SKIPS, gate_step_kind
from remediator.domain.states import State, allowed_actions
from remediator.engine.overrides import holds_target
from remediator.engine.return_to_service import RevertStep, revert_plan
from remediator.engine.runtime import Runtime
from remediator.kube.vocabulary import REMEDIATION_ANNOTATION, STATE_LABEL
from remediator.store.models import Remediation, StepRow

__all__ = ["MOVES", "REASON_REQUIRED", "MovePreview", "offered_moves", "preview", "undo_words"]

MOVES: Final = ("approve", "reject", "cancel", "release", "revert", "return")
REASON_REQUIRED: Final = frozenset({"cancel", "return"})


@dataclass(frozen=True)
class MovePreview:
    """A move in words: a title (`Return gpu-node-3 to service now`), what happens in order, and the end."""

    action: str
    title: str
    steps: tuple[str, ...]
    outcome: str

    def sentence(self) -> str:
        said = f"{self.title}: {', '.join(self.steps)}" if self.steps else self.title
        return f"{said}; {self.outcome}"


async def offered_moves(rt: Runtime, rem: Remediation, *, approval_open: bool) -> tuple[str, ...]:
    """The moves to offer a person now: those the state machine allows, approve and reject only while an
    approval request is open, return only while the remediation still holds its node or GPU."""
    offered: list[str] = []
    for action in allowed_actions(rem.state):
        if action in ("approve", "reject") and not approval_open:
            continue
        if action == "return" and not await holds_target(rt, rem):
            continue
        offered.append(action)
    return tuple(offered)


def _node(rem: Remediation) -> str:
    return rem.node or rem.target_key


def undo_words(undo: RevertStep, node: str) -> str:
    """One undo step as a person reads it (`remove taint remediator.io/gpu-unhealthy:NoSchedule`)."""
    params: Mapping[str, object] = undo.params
    prior: Mapping[str, object] = undo.forward.output or {}
    marks = (f" and the project's label {STATE_LABEL} and annotation {REMEDIATION_ANNOTATION}"
             if prior.get("marked") else "")
    action = undo.action
    if action == "untaint":
        key = params.get("key") or prior.get("key") or DEFAULT_TAINT_KEY
        effect = params.get("effect") or prior.get("effect") or "NoSchedule"
        return f"remove taint {key}:{effect} from {node}{marks}"
    if action == "uncordon":
        return f"uncordon {node}{marks}"
    if action == "unlabel":
        return f"remove label {params.get('key') or undo.forward.params.get('key')} from {node}"
    if action == "unannotate":
        return f"remove annotation {params.get('key') or undo.forward.params.get('key')} from {node}"
    if action == "clear_node_condition":
        kind = params.get("type") or prior.get("type") or undo.forward.params.get("type") or "GPUHealthy"
        return f"clear node condition {kind} on {node}"
    if action == "restore_power_limit":
        return "restore the GPU power limit in force before"
    if action == "restore_quota":
        return "restore the ResourceQuota limits it lowered"
    if action == "restore_workload":
        return "scale the workloads it scaled down back up"
    if action == "unannotate_pods":
        return f"remove annotation {params.get('key') or undo.forward.params.get('key')} from the affected pods"
    shown = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
    return f"run {action}" + (f" ({shown})" if shown else "") + f" (undo of step {undo.forward.name})"


def _gate_words(rt: Runtime, step: Step, skip: frozenset[str]) -> str:
    kind = gate_step_kind(step.action, bool(getattr(rt.actions.get(step.action), "gate", False)))
    if kind == "reboot":
        return (f"skip the reboot wait (gate step {step.name})" if kind in skip
                else f"wait for the node to run a new boot (gate step {step.name})")
    if kind == "validation":
        return (f"skip the validation (gate step {step.name}, {step.action})" if kind in skip
                else f"run the validation {step.name} ({step.action}); if it fails the quarantine stays")
    return f"run gate step {step.name} ({step.action})"


def _undo_plan(rt: Runtime, rem: Remediation, rows: list[StepRow], skip: Iterable[str]) -> list[str]:
    """The return gate and the undo still to run, in words (an undo under way: from where it is)."""
    playbook = playbook_of(rem)
    gate = list(playbook.return_gate)
    plan = revert_plan(rt.actions, playbook, rows)
    start = rem.current_step if rem.state == State.REVERTING else 0
    skips = frozenset(skip)
    words = [_gate_words(rt, step, skips) for step in gate[start:]]
    words += [undo_words(undo, _node(rem)) for undo in plan[max(0, start - len(gate)):]]
    return words


def _forward_from(rem: Remediation, index: int) -> list[str]:
    steps = playbook_of(rem).steps
    return [f"{s.name} ({s.action})" for s in steps[index:]]


async def preview(
    rt: Runtime, rem: Remediation, action: str, *, skip: Iterable[str] = (), approval_step: int | None = None,
) -> MovePreview:
    """What `action` will do to `rem` now. ValueError for an action that is not a person's move."""
    rows = await rt.repo.steps(rem.id)
    node = _node(rem)
    if action == "return":
        skips = sorted(set(skip) & set(SKIPS))
        undo = _undo_plan(rt, rem, rows, skips)
        return MovePreview(
            action, f"Return {node} to service now", tuple(undo) or ("nothing left to undo",),
            "the remediation stops what remains and ends returned"
            + (f" (skipping {' and '.join(skips)})" if skips else "")
            + "; its open approval requests are superseded",
        )
    if action == "revert":
        undo = _undo_plan(rt, rem, rows, ())
        return MovePreview(
            action, f"Undo what {rem.playbook} did on {node}", tuple(undo) or ("nothing to undo",),
            "it ends reverted (or failed, with the quarantine kept, if a gate step fails)",
        )
    if action == "cancel":
        held = _undo_plan(rt, rem, rows, ())
        kept = [w for w in held if not w.startswith(("wait ", "run the validation", "run gate", "skip "))]
        stays = (f"nothing is undone: still to undo later ({'; '.join(kept)})" if kept
                 else "nothing is undone")
        return MovePreview(
            action, f"Cancel {rem.playbook} on {node} where it is",
            (f"stop before its next step (it is {rem.state})", stays),
            "it ends cancelled (revert or return it later); its open approval requests are superseded",
        )
    if action == "release":
        return MovePreview(
            action, f"Let {rem.playbook} on {node} past the flapping and repeat-offender holds",
            ("move it back to pending", "run its playbook: " + ", ".join(_forward_from(rem, rem.current_step))),
            "the circuit breaker and pauses still apply",
        )
    if action in ("approve", "reject"):
        index = approval_step if approval_step is not None else rem.current_step
        steps = playbook_of(rem).steps
        gated = steps[index].name if 0 <= index < len(steps) else f"step {index}"
        if action == "approve":
            return MovePreview(
                action, f"Approve step {gated} of {rem.playbook} on {node}",
                ("run " + ", then ".join(_forward_from(rem, index)),),
                "the remediation goes on at once",
            )
        return MovePreview(
            action, f"Reject step {gated} of {rem.playbook} on {node}",
            (f"do not run {gated} or any step after it",),
            "it ends rejected; what earlier steps did stays until it is reverted or returned",
        )
    raise ValueError(f"unknown move {action!r}; one of {', '.join(MOVES)}")

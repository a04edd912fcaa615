"""Return to service: the proof a node may go back (the return gate), the undo, and what a failed gate does.

A remediation in `reverting` first runs its playbook's `return_gate` steps (nothing is undone until each
passed, was skipped by a person's forced return, or is still waiting); then it undoes every forward step
that changed something, newest first (`revert_plan`), and ends `reverted` (or `returned`, a person's forced
return). A gate step with no verdict waits with backoff and pages once (`gate_unknown`); a gate step that
failed with a GPU verdict climbs the escalation ladder (`escalate`). Every step runs through the step
lifecycle (engine/step_lifecycle.py): its stages, its timeout and retries are the step's own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from remediator.actions.base import AnyAction
from remediator.definitions import Playbook, Step
from remediator.domain.plan_snapshot import playbook_of
from remediator.domain.returns import gate_step_kind, returned_reason, skip_of, skipped_note
from remediator.domain.states import Event
from remediator.domain.timestamps import as_utc
from remediator.engine.ladder import Ladder
from remediator.engine.moves import move, notify
from remediator.engine.runtime import Runtime
from remediator.engine.step_holds import held_by_pause
from remediator.engine.step_lifecycle import StepLifecycle, StepOutcome
from remediator.engine.step_stages import bounded
from remediator.errors import ActionError, CancelRemediation, GateUnknown, ResumeLater
from remediator.store.models import Remediation, StepRow

__all__ = ["GATE_UNKNOWN", "REVERT_PAUSED", "REVERT_RESUMED", "ReturnToService", "RevertStep", "revert_plan"]

log = logging.getLogger(__name__)

REVERT_PAUSED = "controller is paused: the undo waits before its next step"
REVERT_RESUMED = "controller resumed: the undo goes on"
# A gate step's progress key while its verdict is unknown: since, looks, agent, symptom, detail.
GATE_UNKNOWN = "gate_unknown"


@dataclass(frozen=True)
class RevertStep:
    """One undo: the forward step it undoes, the action, and its parameters.

    `templated` is True only for an explicit `revert:` of the playbook, whose parameters are templates
    rendered once before the undo runs; a default undo's parameters are the forward step's stored
    rendered parameters, used verbatim.
    """

    forward: StepRow
    action: str
    params: dict[str, Any]
    templated: bool

    def as_step(self, playbook: Playbook) -> Step:
        """The undo as a step of its own, named `revert:<forward step>`, with the forward step's timeout and
        retries (the playbook's budget for acting on this target; a step's defaults when it is gone)."""
        forward = next((s for s in playbook.steps if s.name == self.forward.name), None)
        undo = Step.model_construct(name=f"revert:{self.forward.name}", action=self.action, params=dict(self.params))
        if forward is None:
            return undo
        return undo.model_copy(update={"timeout": forward.timeout, "retries": forward.retries})


def revert_plan(actions: Mapping[str, AnyAction], playbook: Playbook, rows: list[StepRow]) -> list[RevertStep]:
    """The undo of every forward step that changed something, newest first.

    A default undo takes the forward step's stored, already rendered parameters as they are (only the
    keys the undo action accepts); they are data and are never rendered again. An explicit `revert:`
    keeps its playbook templates, rendered once when the undo runs.
    """
    by_name = {s.name: s for s in playbook.steps}
    plan: list[RevertStep] = []
    done = [r for r in rows if r.phase == "forward" and r.status in ("succeeded", "running")]
    for row in sorted(done, reverse=True, key=lambda r: r.idx):
        step = by_name.get(row.name)
        if step is None or step.revert is False:
            continue
        if step.revert is not None:
            plan.append(RevertStep(row, step.revert.action, dict(step.revert.params), templated=True))
            continue
        action = actions.get(row.action)
        revert_action = actions.get(action.default_revert) if action and action.default_revert else None
        if action is None or action.default_revert is None or revert_action is None:
            continue
        fields = revert_action.Params.model_fields
        params = {k: v for k, v in row.params.items() if k in fields}
        plan.append(RevertStep(row, action.default_revert, params, templated=False))
    return plan


class ReturnToService:
    """The `reverting` state of the remediations this replica drives."""

    def __init__(self, rt: Runtime, steps: StepLifecycle) -> None:
        self.rt = rt
        self.steps = steps

    async def step(self, rem: Remediation) -> timedelta | None:
        """One step of the return: a gate step, an undo, or the final move. A delay when it waits."""
        playbook = playbook_of(rem)
        rows = await self.rt.repo.steps(rem.id)
        idx = rem.current_step
        gate = playbook.return_gate
        returning = rem.return_request  # a person's forced return (domain/returns.py)
        if idx < len(gate):  # proof before return to service: nothing is undone until every gate step passed
            step = gate[idx]
            kind = gate_step_kind(step.action, bool(getattr(self.rt.actions.get(step.action), "gate", False)))
            if returning and kind is not None and kind in skip_of(returning):
                await self.steps.record(rem, "revert", idx, f"gate:{step.name}", step.action, StepOutcome(
                    "skipped", output={"reason": skipped_note(returning, kind), "skip": kind},
                    extra={"by": returning.get("actor")},
                ))
                return None
            return await self.gate(rem, step, idx, rows)
        plan = revert_plan(self.rt.actions, playbook, rows)
        if idx >= len(gate) + len(plan):
            if returning:
                await move(self.rt, rem.id, Event.RETURNED, reason=returned_reason(returning), owner=self.rt.owner,
                           actor=str(returning.get("actor") or "controller"), changes={"quarantined": False},
                           data={"return": {k: returning.get(k) for k in ("actor", "reason", "skip", "from")}})
            else:
                await move(self.rt, rem.id, Event.REVERTED, reason="prior state restored", owner=self.rt.owner,
                           changes={"quarantined": False})
            if rem.quarantined:
                self.observe_return(rem, rows)
            await self.rt.repo.wake_held()  # quarantine room may have freed
            return None
        return await self.undo(rem, plan[idx - len(gate)], idx, playbook, rows, forced=bool(returning))

    async def undo(
        self, rem: Remediation, undo: RevertStep, idx: int, playbook: Playbook, rows: list[StepRow], *, forced: bool
    ) -> timedelta | None:
        """One undo step. The kill switch and a pause scoped to it stop it before a mutating undo (a person's
        forced return is itself the override)."""
        action = self.rt.actions.get(undo.action)
        if (action is None or action.mutating) and not forced:
            if await held_by_pause(self.rt, rem):
                if rem.state_reason != REVERT_PAUSED:
                    await self.rt.repo.note_revert_pause(rem.id, self.rt.owner, paused=True, reason=REVERT_PAUSED)
                return self.rt.settings.held_recheck_interval
            if rem.state_reason == REVERT_PAUSED:
                await self.rt.repo.note_revert_pause(rem.id, self.rt.owner, paused=False, reason=REVERT_RESUMED)
        step = undo.as_step(playbook)
        try:
            outcome = await self.steps.attempt(rem, step, idx, phase="revert", name=step.name, rows=rows,
                                               prior=undo.forward.output, verbatim=not undo.templated)
        except ResumeLater as later:  # e.g. a `wait` named in `revert:`
            return timedelta(seconds=later.delay)
        except CancelRemediation as cancel:
            outcome = StepOutcome.failure(f"an undo cannot cancel its remediation: {cancel.reason}")
        if outcome.failed:
            await self._undo_failed(rem, undo.forward, idx, undo.action, outcome.error or "")
        else:
            await self.after_step(rem, step, step.name, outcome)
        return None

    async def gate(self, rem: Remediation, step: Step, idx: int, rows: list[StepRow]) -> timedelta | None:
        """One step of the playbook's `return_gate`: it passes, waits (ResumeLater, with its reason said once
        in the audit log, the UI and a notification), or refuses the return (the quarantine stays)."""
        name = f"gate:{step.name}"
        action = self.rt.actions.get(step.action)
        try:
            outcome = await self.steps.attempt(rem, step, idx, phase="revert", name=name, rows=rows)
        except GateUnknown as unknown:
            return await self.gate_unknown(rem, step, idx, "revert", name, unknown)
        except ResumeLater as later:
            if later.reason and later.reason != rem.state_reason:
                await self.rt.repo.note_return_waiting(rem.id, self.rt.owner, later.reason)
                await notify(self.rt, rem.id, "return_waiting", later.reason)
            return timedelta(seconds=later.delay)
        except CancelRemediation as cancel:
            outcome = StepOutcome.failure(f"a gate step cannot cancel its remediation: {cancel.reason}")
        if not outcome.failed:
            await self.after_step(rem, step, name, outcome)
            return None
        error, output = outcome.error or "", outcome.output or {}
        await notify(self.rt, rem.id, "step_failed", f"Gate step *{step.name}* ({step.action}) failed: {error}")
        if step.on_failure == "continue":
            await self.steps.record(rem, "revert", idx, name, step.action, StepOutcome(
                "failed", output=output, error=error, extra={"on_failure": "continue"},
            ))
            return None
        await self.steps.record(rem, "revert", idx, name, step.action,
                                StepOutcome("failed", output=output, error=error, advance=False))
        reason = f"return to service refused: gate {step.name} failed: {error}; the quarantine stays"
        await move(self.rt, rem.id, Event.REVERT_FAILED, reason=reason, owner=self.rt.owner,
                   data={"gate": step.name}, outcome="return_refused", notice="return_refused")
        if action is not None and action.gate:
            await self.escalate(rem, output, f"gate {step.name} failed: {error}")
        return None

    async def after_step(self, rem: Remediation, step: Step, name: str, outcome: StepOutcome) -> None:
        """A step that did its work: a gate action's pass is counted, and after an unknown spell the person paged
        hears it recovered."""
        if outcome.status not in ("succeeded", "planned") or self.rt.plan_only:
            return
        if not getattr(self.rt.actions.get(step.action), "gate", False):
            return
        self.rt.metrics.gate_verdicts.labels(playbook=rem.playbook, verdict="passed").inc()
        spell = (outcome.progress or {}).get(GATE_UNKNOWN)
        if not isinstance(spell, Mapping):
            return
        await notify(self.rt, rem.id, "gate_recovered", (
            f"The node agent {spell.get('agent')} of node {rem.node or rem.target_key} answers again (gate "
            f"{name} had no verdict since {spell.get('since')}, {spell.get('looks')} look(s)); the gate passed."
        ))

    async def escalate(self, rem: Remediation, gate: Mapping[str, Any], why: str) -> None:
        """A GPU that failed its validation goes to the next rung of the escalation ladder: only when a GPU that
        could be read failed a named check (`verdict: fail`). A gate step that failed for another reason (its
        template, its parameters) says nothing about the GPU and leaves the ladder alone."""
        if gate.get("verdict") != "fail":
            log.warning("remediation %s: gate failed without a GPU verdict (%s); not escalated", rem.id, why)
            return
        self.rt.metrics.gate_verdicts.labels(playbook=rem.playbook, verdict="failed").inc()
        new_id = await Ladder(self.rt).after_failed_gate(rem, gate, why)
        if new_id is not None:
            await notify(self.rt, rem.id, "escalated", f"escalated to remediation {new_id}: {why}")

    async def gate_unknown(
        self, rem: Remediation, step: Step, idx: int, phase: str, name: str, unknown: GateUnknown
    ) -> timedelta:
        """A gate step with no verdict (the node agent unreachable, an error answer, a timeout, unreadable GPUs).

        Not a failure: the step stays where it is and the node stays quarantined; it is looked at again after
        a backoff that doubles from GATE_UNKNOWN_BACKOFF_S to GATE_UNKNOWN_BACKOFF_MAX_S (counted in the step's
        progress, so a restart or another replica goes on with it). The state reason and the timeline say
        `gate unknown: agent <host:port> <symptom> since <time>`; a person is paged once per spell (not per
        look) and told again when it recovers. The ladder is never climbed from here."""
        settings = self.rt.settings
        now = as_utc(self.rt.clock())
        row = next((r for r in await self.rt.repo.steps(rem.id) if r.phase == phase and r.idx == idx), None)
        spell = dict(((row.progress or {}) if row is not None else {}).get(GATE_UNKNOWN) or {})
        first = not spell
        looks = int(spell.get("looks") or 0) + 1
        since = str(spell.get("since") or now.strftime("%Y-%m-%dT%H:%M:%SZ"))
        delay = min(settings.gate_unknown_backoff_max_s, settings.gate_unknown_backoff_s * 2 ** min(looks - 1, 30))
        spell.update(since=since, looks=looks, agent=unknown.agent, symptom=unknown.symptom, detail=unknown.detail)
        reason = bounded(f"{unknown.reason} since {since}: {unknown.detail}")
        self.rt.metrics.gate_verdicts.labels(playbook=rem.playbook, verdict="unknown").inc()
        await self.rt.repo.note_gate_unknown(
            rem.id, self.rt.owner, phase=phase, idx=idx, spell=spell, reason=reason,
            changed=reason != rem.state_reason,
        )
        if first:
            log.warning("remediation %s: %s; the node stays quarantined, looked at again in %gs", rem.id, reason,
                        delay)
            await notify(self.rt, rem.id, "gate_unknown", (
                f"The validation gate ({step.name}) of node {rem.node or rem.target_key} has no verdict: its node "
                f"agent {unknown.agent} {unknown.symptom}. Could not read: {unknown.detail}\n"
                f"The node stays quarantined and does not escalate; the gate is tried again with backoff (at most "
                f"every {settings.gate_unknown_backoff_max_s:g}s). Check the agent's pod and the network path to "
                f"{unknown.agent}."
            ))
        return timedelta(seconds=delay)

    async def _undo_failed(self, rem: Remediation, forward: StepRow, idx: int, action: str, error: str) -> None:
        await notify(self.rt, rem.id, "step_failed", f"Undo of step *{forward.name}* ({action}) failed: {error}")
        await self.steps.record(rem, "revert", idx, f"revert:{forward.name}", action,
                                StepOutcome("failed", error=error, advance=False))
        await move(self.rt, rem.id, Event.REVERT_FAILED, reason=f"revert of {forward.name} failed: {error}",
                   owner=self.rt.owner, detail=error, outcome="revert_failed")

    # -- the node's quarantine at the end -----------------------------------------------------------

    async def node_still_quarantined(self, rem: Remediation) -> bool:
        """Does the node still carry this controller's quarantine (taint, or cordon it made)?

        A playbook may lift its own quarantine (reset-gpu untaints after a good reset); such a node must
        not count against MAX_QUARANTINED_NODES any more. Unknown (no cluster, API error) counts as yes.
        """
        if self.rt.plan_only:
            return False
        if self.rt.kube is None or not rem.node:
            return True
        try:
            node = await self.rt.kube.get_node(rem.node)
        except ActionError:
            return True
        for row in await self.rt.repo.steps(rem.id):
            action = self.rt.actions.get(row.action)
            if (
                row.phase == "forward" and row.status == "succeeded" and action is not None and action.quarantines
                and action.still_holds(node, row.params, rem.id)
            ):
                return True
        return False

    def observe_return(self, rem: Remediation, rows: list[StepRow]) -> None:
        """The node went back to service: the time from its quarantine (else the remediation's start)."""
        started = self.steps.quarantine_started(rows) or as_utc(rem.created_at)
        self.rt.metrics.time_to_return.labels(playbook=rem.playbook).observe(
            max(0.0, (as_utc(self.rt.clock()) - started).total_seconds())
        )

"""The `running` state: a remediation's playbook steps, one at a time, in order, and how it ends.

Before each step the kill switch, a scoped pause and the opt-out label are read (engine/step_holds.py); the
step runs through its lifecycle (engine/step_lifecycle.py); a failure continues or fails the remediation as
the step says (a failed validation climbs the escalation ladder), a step that cancels its remediation undoes
what was done, and after the last step the remediation ends `succeeded` (`planned` in a plan-only run).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from remediator.definitions import Playbook, Step
from remediator.domain.plan_snapshot import playbook_of
from remediator.domain.states import Event
from remediator.engine.moves import move, notify
from remediator.engine.return_to_service import ReturnToService, revert_plan
from remediator.engine.runtime import Runtime
from remediator.engine.step_holds import hold
from remediator.engine.step_lifecycle import PreparedStep, StepLifecycle, StepOutcome
from remediator.errors import CancelRemediation, GateUnknown, ResumeLater
from remediator.store.models import Remediation, StepRow

__all__ = ["ForwardSteps"]


class ForwardSteps:
    """The forward steps of the remediations this replica drives."""

    def __init__(self, rt: Runtime, steps: StepLifecycle, returns: ReturnToService) -> None:
        self.rt = rt
        self.steps = steps
        self.returns = returns

    async def step(
        self, rem: Remediation, *, admitted: bool = False, begun: PreparedStep | None = None
    ) -> timedelta | None:
        """One forward step. `admitted`: the guardrails admitted the remediation just before, in this drive, with
        the pause flag read under the admission lock in the admitting transaction; the first step does not read
        it again (the flag can change at any moment either way: the check stops a mutating step that starts
        after the pause is seen, and here it was seen at the commit just before). `begun`: that admission
        began the first step (StepLifecycle.prepare_first)."""
        playbook = playbook_of(rem)
        idx = rem.current_step
        if idx >= len(playbook.steps):
            await self.finish(rem, playbook)
            return None
        step = playbook.steps[idx]
        action = self.rt.actions.get(step.action)
        held = None if admitted else await hold(self.rt, rem, action is None or action.mutating)
        if held is not None:
            reason, guardrail = held
            await move(self.rt, rem.id, Event.HOLD, reason=reason, owner=self.rt.owner, data={"guardrail": guardrail})
            return None
        # Forward steps run in order from 0 and an undo has its own phase: before the first step there is no
        # earlier step whose output a template or condition could read, so the rows need no reading.
        rows: list[StepRow] | None = [] if idx == 0 else None
        try:
            outcome = await self.steps.attempt(
                rem, step, idx, phase="forward", name=step.name, rows=rows,
                begun=begun if begun is not None and begun.begin.idx == idx else None,
            )
        except GateUnknown as unknown:
            return await self.returns.gate_unknown(rem, step, idx, "forward", step.name, unknown)
        except ResumeLater as later:
            return timedelta(seconds=later.delay)
        except CancelRemediation as cancel:
            await self._cancelled(rem, step, idx, cancel)
            return None
        if outcome.failed:
            await self._failed(rem, step, idx, outcome.error or "", outcome.output)
        else:
            await self.returns.after_step(rem, step, step.name, outcome)
        return None

    async def _cancelled(self, rem: Remediation, step: Step, idx: int, cancel: CancelRemediation) -> None:
        """A step ended the remediation (e.g. `wait` saw the alert resolve): cancel, and undo what was done."""
        await self.steps.record(rem, "forward", idx, step.name, step.action, StepOutcome(
            "cancelled", output={"message": cancel.reason, **cancel.output}, advance=False,
        ))
        await move(self.rt, rem.id, Event.CANCEL, reason=cancel.reason, owner=self.rt.owner)
        if cancel.revert and revert_plan(self.rt.actions, playbook_of(rem), await self.rt.repo.steps(rem.id)):
            await move(self.rt, rem.id, Event.REVERT, reason=cancel.reason)

    async def _failed(
        self, rem: Remediation, step: Step, idx: int, error: str, output: dict[str, Any] | None
    ) -> None:
        if step.on_failure == "continue":
            await self.steps.record(rem, "forward", idx, step.name, step.action, StepOutcome(
                "failed", output=output, error=error, extra={"on_failure": "continue"},
            ))
            await notify(self.rt, rem.id, "step_failed", f"Step *{step.name}* ({step.action}) failed: {error}\n"
                                                         "The playbook says continue.")
            return
        await notify(self.rt, rem.id, "step_failed", f"Step *{step.name}* ({step.action}) failed: {error}")
        await self.steps.record(rem, "forward", idx, step.name, step.action,
                                StepOutcome("failed", output=output, error=error, advance=False))
        await move(self.rt, rem.id, Event.FAIL, reason=f"step {step.name} failed: {error}", owner=self.rt.owner,
                   detail=error)
        action = self.rt.actions.get(step.action)
        if action is not None and action.gate:
            await self.returns.escalate(rem, output or {}, f"step {step.name} failed: {error}")

    async def finish(self, rem: Remediation, playbook: Playbook) -> None:
        """After the last step: `succeeded` (`planned` in a plan-only run); the node's quarantine counted as it
        is now, and an alert that resolved meanwhile starts the undo when the playbook says so."""
        reason = "plan-only: nothing was changed" if self.rt.plan_only else "all steps done"
        still = rem.quarantined and await self.returns.node_still_quarantined(rem)
        ending = Event.PLAN if self.rt.plan_only else Event.SUCCEED  # plan-only runs end `planned`
        fresh = await move(self.rt, rem.id, ending, reason=reason, owner=self.rt.owner,
                           changes={"quarantined": still})
        if rem.quarantined and not still:
            await self.rt.repo.wake_held()  # the playbook lifted its own quarantine: room for held ones
            self.returns.observe_return(rem, await self.rt.repo.steps(rem.id))
        if fresh.alert_resolved and playbook.on_resolved == "revert":
            await move(self.rt, rem.id, Event.REVERT, reason="alert resolved while running")

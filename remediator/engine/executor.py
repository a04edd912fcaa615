"""The executor: what one replica (`rt.owner`) does with the remediations it holds the lease of.

A thin coordinator over the engine's concerns, each in its own module: driving a remediation under its lease
with crash backoff and dependency waits (engine/remediation_driver.py), its admission (engine/admission.py),
the context that admission reads (engine/remediation_context.py), its forward steps (engine/forward_steps.py),
each step's lifecycle (engine/step_lifecycle.py, over the pure stages in engine/step_stages.py) and its return
to service with gate and escalation (engine/return_to_service.py). The worker builds one Executor and drives
remediations through it; move previews, overrides and hand changes ask it for a remediation's undo plan.

Templates are rendered once: a step's parameters come from the playbook, and alert text enters them only
as variables. What was rendered (stored step params, outputs) is data and never rendered again; an undo
without an explicit `revert:` reuses the stored rendered parameters verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from remediator.actions.base import ActionContext, Target
from remediator.actions.context import Gathered
from remediator.engine.admission import admit
from remediator.engine.admissions import AdmissionQueue
from remediator.engine.early_contexts import ContextPrefetch
from remediator.engine.forward_steps import ForwardSteps
from remediator.engine.remediation_context import read_context
from remediator.engine.remediation_driver import drive, remediation_log_fields
from remediator.engine.return_to_service import GATE_UNKNOWN, ReturnToService, RevertStep
from remediator.engine.runtime import Runtime
from remediator.engine.step_holds import live_labels
from remediator.engine.step_lifecycle import PreparedStep, StepLifecycle, run_with_retries, transient_policy
from remediator.engine.step_stages import failure_reason, last_line
from remediator.engine.storm_guard import StormGuard
from remediator.store.models import Remediation

__all__ = [
    "GATE_UNKNOWN", "Executor", "RevertStep", "failure_reason", "last_line", "remediation_log_fields",
    "run_with_retries", "transient_policy",
]

class Executor:
    """Drives remediations for one replica (`rt.owner`)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.admissions = AdmissionQueue(rt.repo)  # this replica's admissions go to the store together
        self.contexts = ContextPrefetch()  # contexts read while their remediations' decision commits (worker)
        self.storms = StormGuard(rt)  # the shared-cause analysis of the window, kept between admissions
        self.steps = StepLifecycle(rt)
        self.returns = ReturnToService(rt, self.steps)
        self.forward = ForwardSteps(rt, self.steps, self.returns)

    # -- public -----------------------------------------------------------------------------------

    async def drive(self, rem_id: str, claimed: Remediation | None = None) -> None:
        """Advance one remediation until it waits, finishes or loses its lease (engine/remediation_driver.py).

        `claimed` is the row as the claiming transaction left it, used instead of reading it again."""
        await drive(self, rem_id, claimed)

    # -- admission --------------------------------------------------------------------------------

    async def _admit(self, rem: Remediation) -> tuple[Remediation, PreparedStep | None] | None:
        """Ask the guardrails whether `rem` may start (engine/admission.py)."""
        return await admit(self, rem)

    async def _prepare_first(self, rem: Remediation, node: dict[str, Any] | None) -> PreparedStep | None:
        """Step 0 of a new remediation, to begin with its admission (StepLifecycle.prepare_first)."""
        return await self.steps.prepare_first(rem, node)

    async def read_context(self, target: Target, labels: Mapping[str, str], rem_id: str | None) -> Gathered:
        """A remediation's context (engine/remediation_context.py). `rem_id` names the remediation in logs
        (None when read ahead of the decision: ContextPrefetch)."""
        return await read_context(self.rt, target, labels, rem_id)

    # -- the steps: forward, then the return to service ---------------------------------------------

    async def _forward(
        self, rem: Remediation, *, admitted: bool = False, begun: PreparedStep | None = None
    ) -> timedelta | None:
        """One forward step (engine/forward_steps.py)."""
        return await self.forward.step(rem, admitted=admitted, begun=begun)

    async def _revert(self, rem: Remediation) -> timedelta | None:
        """One step of the return to service: a gate step, an undo or the final move (engine/return_to_service.py)."""
        return await self.returns.step(rem)

    # -- helpers ----------------------------------------------------------------------------------

    def context_for(self, rem: Remediation, name: str, prior: Mapping[str, Any] | None) -> ActionContext:
        """An undo action's context outside the remediation's steps (a release's clean-up: engine/hand_changes.py)."""
        return self.steps.context(rem, name, 60.0, "revert", rem.current_step, {}, prior)

    async def _live_labels(self, rem: Remediation) -> dict[str, str] | None:
        """The node's labels as they are now, else those of the context read (engine/step_holds.py)."""
        return await live_labels(self.rt, rem)

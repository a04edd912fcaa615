"""One step's lifecycle on the live path: prepare, begin, run, record.

Every step a remediation runs goes through here: a forward step, the first step begun by its admission, a
return gate's step and an undo. Preparing runs the pure stages (engine/step_stages.py: applies, approval,
render, parse) and gives one typed value; beginning stores the step's row with what the action observed
before its first write; running calls the action within its timeout and transient-error budget; recording
stores the step's outcome, one typed value (`StepOutcome`, modelled on kopf's handler Outcome), through the
one call to the store's `finish_step`.

Error boundary: whatever goes wrong inside a step (its condition, its templates, its parameters, the action, a
peer's answer) becomes that step's failure with the stage that failed; only the store (lease lost, database
unavailable) and the engine's own signals (ResumeLater, CancelRemediation, DependencyWaiting) pass through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from remediator.actions.base import ActionContext, ActionResult, AnyAction
from remediator.definitions import Step
from remediator.domain.plan_snapshot import plan_of, stored_alert_field
from remediator.domain.timestamps import as_utc, utc_now
from remediator.engine.approval_decisions import step_approved
from remediator.engine.approvals import Approvals
from remediator.engine.planning import stored_variables, target_of
from remediator.engine.runtime import Runtime
from remediator.engine.step_stages import (
    Failed,
    NeedsApproval,
    Prepared,
    Ready,
    Skipped,
    Stage,
    approval_required,
    failure_reason,
    parse,
    prepare,
)
from remediator.errors import (
    ActionError,
    CancelRemediation,
    Conflict,
    LeaseLost,
    ResumeLater,
    StepFailed,
    StoreUnavailable,
)
from remediator.retrying import (
    CONFLICT_ATTEMPTS,
    DependencyWaiting,
    TransientPolicy,
    is_transient,
    on_conflict,
    transient_policy,
)
from remediator.store.models import Remediation, StepRow
from remediator.store.step_store import BeginStep

__all__ = [
    "PASS_THROUGH", "Phase", "PreparedStep", "StepLifecycle", "StepOutcome", "StepStatus", "run_with_retries",
    "transient_policy",
]

log = logging.getLogger(__name__)

Phase = Literal["forward", "revert"]
StepStatus = Literal["succeeded", "planned", "skipped", "failed", "cancelled", "approval"]

# Not a step's failure: the engine's own signals and the store's; they pass the step error boundary.
PASS_THROUGH: tuple[type[BaseException], ...] = (
    ResumeLater, CancelRemediation, LeaseLost, StoreUnavailable, DependencyWaiting,
)


@dataclass(frozen=True)
class StepOutcome:
    """How a step ended, as it is recorded: its status, what the action found, the error (a failure), and
    the step's rendered parameters (empty when it failed before they were rendered).

    `advance`: the cursor moves on past the step (False: the remediation stops at it); `extra` goes into the
    step's audit event; `progress` is the step's progress as it ended (a gate's unknown spell)."""

    status: StepStatus
    output: dict[str, Any] | None = None
    error: str | None = None
    rendered: dict[str, Any] = field(default_factory=dict)
    advance: bool = True
    extra: dict[str, Any] | None = None
    progress: Mapping[str, Any] | None = None
    stage: Stage | None = None  # where a failed step failed

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @classmethod
    def failure(cls, error: str, output: dict[str, Any] | None = None, rendered: dict[str, Any] | None = None,
                stage: Stage | None = None) -> StepOutcome:
        """A step that failed (at `stage`), not yet recorded: its caller decides what the failure does."""
        return cls("failed", output=output, error=error, rendered=dict(rendered or {}), stage=stage)


@dataclass
class PreparedStep:
    """Step `begin.idx` ready to run: what the admission stores (`begin`) and what the action runs with."""

    step: Step
    action: AnyAction
    params: Any  # parsed by the action (`Action.parse`)
    ctx: ActionContext
    begin: BeginStep


async def run_with_retries(
    action: AnyAction, ctx: ActionContext, params: Any, *, timeout: float, policy: TransientPolicy | None = None
) -> ActionResult:
    """Run an action with a deadline; retry its transient errors (connection, timeout, 429, 5xx) within the
    policy's budget, honouring Retry-After (remediator/retrying.py). Steps are idempotent, so the action runs
    again from the top. DependencyWaiting when the budget runs out, or when the deadline passes while the
    dependency is failing: a transient failure never fails the step. A permanent error is raised at once."""
    policy = policy or transient_policy(ctx.settings)
    first: datetime | None = None
    last: BaseException | None = None

    def note(exc: BaseException, wait: float) -> None:
        nonlocal first, last
        first, last = first or utc_now(), exc
        log.info("step %s of remediation %s: %s; retrying in %.1fs", ctx.step_name, ctx.remediation_id,
                 failure_reason(exc), wait)

    async def attempt() -> ActionResult:
        # A 409 that escapes the action (a write guarded by a resourceVersion it read) runs it again at once,
        # a few times (remediator.retrying.on_conflict); then it is a permanent failure of the step.
        try:
            async for conflict in on_conflict(Conflict):
                with conflict:
                    return await action.run(ctx, params)
        except Conflict as exc:
            raise StepFailed(f"{failure_reason(exc)} ({CONFLICT_ATTEMPTS} attempts)") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    try:
        async with asyncio.timeout(timeout):
            return await policy.call(attempt, on_retry=note)
    except TimeoutError:
        if last is not None and first is not None:
            raise DependencyWaiting(last, first) from None
        raise StepFailed(f"{action.name} did not finish within {timeout:g}s") from None


class StepLifecycle:
    """The stages of one step of a remediation this replica drives (`rt.owner`)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    # -- prepare ----------------------------------------------------------------------------------

    async def prepare(
        self, rem: Remediation, step: Step, idx: int, phase: Phase, variables: Mapping[str, Any],
    ) -> Prepared:
        """The pure stages of `step` for this remediation; a forward step asks whether it waits for approval."""
        action = self.rt.actions.get(step.action)
        waits = False
        if phase == "forward" and approval_required(step, idx, plan_of(rem).require_approval):
            waits = not step_approved(rem, await self.rt.repo.current_approval(rem.id), idx)
        return prepare(step, action, variables, needs_approval=waits)

    async def prepare_first(self, rem: Remediation, node: dict[str, Any] | None) -> PreparedStep | None:
        """Step 0 of a new remediation prepared to begin with its admission (the admitting transaction stores its
        row: `RemediationStore.admit_many`), or None when it goes the usual way: when it does not apply, waits
        for an approval, fails a stage (the usual path records that as the step's failure), or without the node
        object its context was read from (the observe would then read it for a remediation the breaker may
        hold). `node` is given to the action's observe as `ctx.node_read`, so the taint patches from it."""
        playbook = plan_of(rem).playbook
        if rem.current_step != 0 or playbook is None or not playbook.steps:
            return None
        step = playbook.steps[0]
        action = self.rt.actions.get(step.action)
        if action is None or approval_required(step, 0, plan_of(rem).require_approval):
            return None
        if node is None and not self.rt.plan_only:
            return None
        ready = prepare(step, action, stored_variables(rem, []))
        if not isinstance(ready, Ready):
            log.debug("first step of remediation %s not prepared: %s", rem.id, ready)
            return None
        ctx = self.context(rem, step.name, step.timeout.total_seconds(), "forward", 0, {}, None)
        ctx.node_read = node
        try:
            progress = await self.observe(action, ctx, ready.params)
        finally:
            ctx.node_read = None
        begin = BeginStep("forward", 0, step.name, step.action, ready.rendered, progress)
        return PreparedStep(step, action, ready.params, ctx, begin)

    # -- the whole step ---------------------------------------------------------------------------

    async def attempt(
        self, rem: Remediation, step: Step, idx: int, *, phase: Phase, name: str, rows: list[StepRow] | None,
        begun: PreparedStep | None = None, prior: Mapping[str, Any] | None = None, verbatim: bool = False,
    ) -> StepOutcome:
        """One step of the playbook (`forward`), of its return gate or an undo (`revert`), through every stage.

        A step that ran, was skipped or waits for an approval is recorded (or asked for) here and its outcome
        returned; a failed one is returned unrecorded (`failed`): its caller decides what the failure does.
        ResumeLater, CancelRemediation and the store's signals reach the caller. `rows`: the remediation's step
        rows, read here when None. `begun`: the step as its admission prepared and began it: the action runs
        at once. `prior`: an undo's forward output. `verbatim`: an undo whose parameters are the forward step's
        stored rendered ones, used as they are (no condition, no approval, no template, nothing observed)."""
        timeout = step.timeout.total_seconds()
        stage, rendered = Stage.APPLIES, dict(step.params) if verbatim else {}
        try:
            rows = await self.rt.repo.steps(rem.id) if rows is None else rows
            if begun is not None:
                stage, rendered, action = Stage.RUN, begun.begin.params, begun.action
                params, ctx = begun.params, begun.ctx
                ctx.progress = dict(begun.begin.progress or {})  # as the admission stored it with the new row
            else:
                if verbatim:
                    stage = Stage.PARSE
                    found = self.rt.actions.get(step.action)
                    prepared: Prepared = Ready(found, rendered, parse(step, found, rendered)) if found else Failed(
                        stage, f"{stage.word} error: {failure_reason(LookupError(f'unknown action {step.action!r}'))}",
                        rendered,
                    )
                else:
                    prepared = await self.prepare(rem, step, idx, phase, stored_variables(rem, rows))
                if isinstance(prepared, Skipped):
                    outcome = StepOutcome("skipped", output={"reason": prepared.reason})
                    await self.record(rem, phase, idx, name, step.action, outcome)
                    return outcome
                if isinstance(prepared, NeedsApproval):
                    await Approvals(self.rt).request(rem, step, idx)
                    return StepOutcome("approval")
                if isinstance(prepared, Failed):
                    return StepOutcome.failure(prepared.error, rendered=prepared.rendered, stage=prepared.stage)
                stage, rendered, action, params = Stage.BEGIN, prepared.rendered, prepared.action, prepared.params
                ctx = self.context(rem, name, timeout, phase, idx, {}, prior)
                row = await self.rt.repo.begin_step(
                    rem.id, self.rt.owner, phase=phase, idx=idx, name=name, action=step.action, params=rendered,
                    progress=None if verbatim else await self.observe(action, ctx, params),
                )
                ctx.progress = dict(row.progress or {})  # as stored: a resumed step's own, else what was observed
                stage = Stage.RUN
            outcome = await self.run(action, ctx, params, timeout, retries=step.retries)
            if outcome.failed:
                return StepOutcome.failure(outcome.error or "", outcome.output, rendered, Stage.RUN)
            stage = Stage.RECORD
            await self.record(rem, phase, idx, name, step.action, outcome)
            if phase == "forward" and action.quarantines and not ctx.dry_run:
                self._observe_quarantine(rem, rows)
            return outcome
        except ResumeLater:
            # It looks again later: that look resumes this step and is not a new start in the timeline.
            await self.rt.repo.note_step_waiting(rem.id, self.rt.owner, phase=phase, idx=idx)
            raise
        except PASS_THROUGH:
            raise
        except Exception as exc:  # the step error boundary: any other error is this step's failure at its stage
            return StepOutcome.failure(f"{stage.word} error: {failure_reason(exc)}", rendered=rendered, stage=stage)

    # -- begin, run, record -----------------------------------------------------------------------

    async def observe(self, action: AnyAction, ctx: ActionContext, params: Any) -> dict[str, Any] | None:
        """What the action observes before its step begins (`Action.observe`); None in a dry run or when the
        read fails (the action then reads and checkpoints it itself, under its retries and timeout)."""
        if ctx.dry_run:
            return None
        try:
            return await action.observe(ctx, params)
        except PASS_THROUGH:
            raise
        except Exception as exc:  # any failed read: the action reads again itself, within its own boundary
            ctx.observed = None
            log.debug("step %s of remediation %s: observing before it begins failed", ctx.step_name,
                      ctx.remediation_id, exc_info=True)
            retry_after = getattr(exc, "retry_after", None) if is_transient(exc) else None
            if retry_after:  # the action reads again next: not sooner than the API server asked
                await asyncio.sleep(min(float(retry_after), self.rt.settings.transient_budget_s))
            return None

    async def run(
        self, action: AnyAction, ctx: ActionContext, params: Any, timeout: float, *, retries: int | None = None
    ) -> StepOutcome:
        """The action's outcome: `succeeded` (or `planned` when it only described its work), or `failed` with
        why (any error but the engine's and the store's signals). `retries`: the step's setting (0: no budget
        for transient errors, see `transient_policy`)."""
        started = time.perf_counter()
        if ctx.dry_run and self.rt.kube is None:
            self.rt.metrics.step_duration.labels(action=action.name, outcome="planned").observe(0)
            return StepOutcome("planned", output={
                "changed": False, "message": "plan-only: " + action.describe(ctx.target, params), "planned": True,
            }, progress=ctx.progress)
        try:
            policy = transient_policy(self.rt.settings, retries)
            result = await run_with_retries(action, ctx, params, timeout=timeout, policy=policy)
        except PASS_THROUGH:
            raise
        except Exception as exc:  # an ActionError, or an unexpected error (e.g. a peer's malformed answer)
            self.rt.metrics.step_duration.labels(action=action.name, outcome="failed").observe(
                time.perf_counter() - started
            )
            if not isinstance(exc, ActionError):
                log.warning("step %s of remediation %s failed unexpectedly", ctx.step_name, ctx.remediation_id,
                            exc_info=True)
            return StepOutcome.failure(failure_reason(exc), dict(getattr(exc, "output", None) or {}))
        self.rt.metrics.step_duration.labels(action=action.name, outcome="succeeded").observe(
            time.perf_counter() - started
        )
        status: StepStatus = "planned" if ctx.dry_run and self.rt.kube is None else "succeeded"
        output = {"changed": result.changed, "message": result.message, **result.output}
        return StepOutcome(status, output=output, progress=ctx.progress)

    async def record(self, rem: Remediation, phase: Phase, idx: int, name: str, action: str,
                     outcome: StepOutcome) -> None:
        """Store a step's outcome and move the cursor (unless `advance` is False), with its audit event: every
        step's end is recorded here."""
        await self.rt.repo.finish_step(
            rem.id, self.rt.owner, phase=phase, idx=idx, name=name, action=action, status=outcome.status,
            output=outcome.output, error=outcome.error, advance=outcome.advance, extra=outcome.extra,
        )

    # -- the step's surroundings ------------------------------------------------------------------

    def context(
        self, rem: Remediation, step_name: str, timeout: float, phase: Phase, idx: int, progress: dict[str, Any],
        prior: Mapping[str, Any] | None,
    ) -> ActionContext:
        """The action's context for one step of `rem`: its checkpoint writes the step's progress."""
        repo, owner = self.rt.repo, self.rt.owner

        async def checkpoint(data: dict[str, Any]) -> None:
            await repo.checkpoint_step(rem.id, owner, phase=phase, idx=idx, progress=data)

        async def resolved() -> bool:
            fresh = await repo.get(rem.id)
            return bool(fresh and fresh.alert_resolved)

        return ActionContext(
            remediation_id=rem.id, step_name=step_name, target=target_of(rem), settings=self.rt.settings,
            dry_run=self.rt.plan_only, kube=self.rt.kube, sidecar=self.rt.sidecar, notifier=self.rt.notifier,
            timeout=timeout, prior_output=prior, progress=dict(progress or {}), checkpoint=checkpoint,
            alert={"labels": rem.alert_labels, "annotations": rem.alert_annotations, "name": rem.alertname,
                   "fingerprint": rem.alert_fingerprint},
            alert_starts_at=plan_of(rem).alert.starts_at, gathered=rem.context, alert_resolved=resolved,
        )

    def quarantine_started(self, rows: list[StepRow]) -> datetime | None:
        """When the first quarantining forward step of a remediation finished, if one did."""
        done = [
            r.finished_at for r in rows
            if r.phase == "forward" and r.status == "succeeded" and r.finished_at is not None
            and getattr(self.rt.actions.get(r.action), "quarantines", False)
        ]
        return as_utc(min(done)) if done else None

    def _observe_quarantine(self, rem: Remediation, rows: list[StepRow]) -> None:
        """The first quarantining step of `rem` finished: the time from the alert to the quarantine."""
        if self.quarantine_started(rows) is not None:
            return
        raw = stored_alert_field(rem.plan, "starts_at")
        started = as_utc(rem.created_at)
        if isinstance(raw, str) and raw:
            with contextlib.suppress(ValueError):
                started = as_utc(datetime.fromisoformat(raw.replace("Z", "+00:00")))
        self.rt.metrics.time_to_quarantine.labels(playbook=rem.playbook).observe(
            max(0.0, (self.rt.clock() - started).total_seconds())
        )

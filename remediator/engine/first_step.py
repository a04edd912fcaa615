"""A new remediation's first step, prepared before its admission and begun in the admitting transaction.

On the path from a webhook to the taint, the first step used to begin in a transaction of its own right after
the admission committed, and the taint read the node once more before it: a transaction and a Kubernetes read
between the admission and the patch. Everything the step row needs is known before the admission: the
variables (alert, target, the context just read), whether the step applies, whether it waits for approval,
its rendered and parsed parameters, and what the action observes before its first write, which for the node
actions (taint, cordon) is the node object the context read a moment ago. So the step is prepared first, the
admission inserts its row and `step.started` in the same transaction as `start` when it admits the
remediation (store: `RemediationStore.admit_many`), and the drive runs the action on that row.

Only a step that would begin on its usual path is prepared: none when the step does not apply, waits for an
approval, or fails to render or parse (its usual path records that as the step's failure), and none without
the node object (the observe would then read it for a remediation the breaker may hold). A remediation that
was held re-enters by its usual path. A crash after the admission's commit finds the row begun with what was
observed, exactly as after `begin_step`: the resumed step keeps it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remediator.actions.base import ActionContext, AnyAction
from remediator.definitions import Step
from remediator.definitions.templates import render_params
from remediator.engine.planning import approval_required, step_applies
from remediator.store.step_store import BeginStep

__all__ = ["PreparedStep", "prepare_first_step"]

log = logging.getLogger(__name__)


@dataclass
class PreparedStep:
    """Step `begin.idx` ready to run: what the admission stores (`begin`) and what the action runs with."""

    step: Step
    action: AnyAction
    params: Any  # parsed by the action (`Action.parse`)
    ctx: ActionContext
    begin: BeginStep


Observe = Callable[[AnyAction, ActionContext, Any], Awaitable[dict[str, Any] | None]]


async def prepare_first_step(
    step: Step, action: AnyAction | None, *, require_approval: bool, variables: Mapping[str, Any],
    ctx: ActionContext, node: dict[str, Any] | None, observe: Observe,
) -> PreparedStep | None:
    """Step 0 prepared for `ctx` (its remediation, step name and timeout), or None when it goes the usual way.

    `node`: the node object the context was read from, given to `observe` (the executor's error boundary
    around `Action.observe`, which skips a dry run) as `ctx.node_read`."""
    if action is None or approval_required(step, 0, require_approval):
        return None
    if node is None and not ctx.dry_run:
        return None
    try:
        if not step_applies(step, variables):
            return None
        rendered = render_params(step.params, variables)
        params = action.parse(rendered)
    except Exception:  # the usual path runs the same stages and records the failure as the step's
        log.debug("first step of remediation %s not prepared", ctx.remediation_id, exc_info=True)
        return None
    ctx.node_read = node
    try:
        progress = await observe(action, ctx, params)
    finally:
        ctx.node_read = None
    begin = BeginStep("forward", 0, step.name, step.action, rendered, progress)
    return PreparedStep(step, action, params, ctx, begin)

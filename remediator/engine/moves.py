"""One way to move a remediation: the transition, then what entering its new state does.

The store persists a move and its audit event (atomically, checked against domain/states.py); this module
adds the effects of entering the new state, from one table: the `remediator_remediations_total` outcome and
the notification event. Every caller (the executor, the API's cancel and revert, an alert resolving) goes
through `move`, so no path can change state without its metric and its notification. A caller with a more
precise outcome for the same state (an undo that failed, a refused return) passes it explicitly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from remediator.domain.states import Event, State
from remediator.engine.runtime import Runtime
from remediator.store.models import Remediation

__all__ = ["ON_ENTER", "Effect", "after_resolved", "entered", "move", "notify"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Effect:
    """What entering a state does besides the audit event the store writes."""

    outcome: str | None = None  # label of remediator_remediations_total
    notify: str | None = None  # notification event (engine/notifications.py EVENTS)


# Approval decisions (approved, rejected, expired) and guardrail holds are announced by the approval service
# and the admission with their own wording; they are not in this table.
ON_ENTER: Final[Mapping[State, Effect]] = MappingProxyType({
    State.SUCCEEDED: Effect("succeeded", "succeeded"),
    State.PLANNED: Effect("planned", "planned"),
    State.FAILED: Effect("failed", "failed"),
    State.CANCELLED: Effect("cancelled", "cancelled"),
    State.REVERTING: Effect(None, "reverting"),
    State.REVERTED: Effect("reverted", "reverted"),
    State.RETURNED: Effect("returned", "returned"),
    State.RELEASED: Effect("released", "released"),
})


async def notify(rt: Runtime, rem_id: str, event: str, detail: str) -> None:
    """Send one notification; a failed notification never blocks or fails a remediation."""
    if rt.notifier is None:
        return
    try:
        await rt.notifier.remediation_event(rem_id, event, detail)
    # broad: a failed notification (the channel's error or a bug formatting it) never blocks or fails a remediation
    except Exception:
        log.exception("notification for %s (%s) failed", rem_id, event)


async def entered(
    rt: Runtime, rem: Remediation, detail: str | None, *, outcome: str | None = None, notice: str | None = None
) -> None:
    """Run the effects of the state `rem` is now in."""
    effect = ON_ENTER.get(State(rem.state))
    if effect is None:
        return
    label = outcome or effect.outcome
    if label is not None:
        rt.metrics.remediations.labels(playbook=rem.playbook, outcome=label).inc()
    event = notice or effect.notify
    if event is not None:
        await notify(rt, rem.id, event, detail or rem.state_reason or rem.state)


async def move(
    rt: Runtime, rem_id: str, event: Event, *, reason: str, actor: str = "controller", owner: str | None = None,
    detail: str | None = None, outcome: str | None = None, notice: str | None = None,
    data: dict[str, Any] | None = None, changes: dict[str, Any] | None = None,
) -> Remediation:
    """Move one remediation by `event` (raises IllegalTransition), then run the effects of its new state.

    `detail` is the notification's text (default: `reason`); `outcome` and `notice` replace the table's
    metric label and notification event for this move.
    """
    if event is Event.REVERT:
        rem = await rt.repo.start_revert(rem_id, reason, actor=actor)
    elif event is Event.RELEASE:  # back to pending, due at once (a held one waits for its recheck)
        rem = await rt.repo.transition(
            rem_id, event, reason=reason, actor=actor, owner=owner, data=data,
            changes={"next_run_at": rt.clock(), **(changes or {})},
        )
    else:
        rem = await rt.repo.transition(
            rem_id, event, reason=reason, actor=actor, owner=owner, data=data, changes=changes
        )
    await entered(rt, rem, detail or reason, outcome=outcome, notice=notice)
    return rem


async def after_resolved(rt: Runtime, effects: Iterable[tuple[str, str]]) -> None:
    """The effects of what a resolved alert did inside the store's transaction (cancel and/or revert)."""
    for rem_id, what in effects:
        if what not in ("cancelled", "cancelled+reverting", "reverting"):
            continue
        rem = await rt.repo.get(rem_id)
        if rem is None:
            continue
        if what.startswith("cancelled"):
            rt.metrics.remediations.labels(playbook=rem.playbook, outcome="cancelled").inc()
            await notify(rt, rem_id, "cancelled", "alert resolved")
        if what.endswith("reverting"):
            await notify(rt, rem_id, "reverting", "alert resolved")

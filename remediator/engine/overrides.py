"""A person overruling the controller on one remediation: cancel, revert, release and return to service.

The API (bearer token), the CLI (through the API) and the web UI (signed-in session, CSRF, confirmation) all
end here, so each move is checked, recorded and announced the same way whoever asks: the actor and the
reason go into the state reason, the audit event of the move (`data.by`, `data.reason`) and the timeline;
cancelling or returning supersedes the remediation's open approval requests (the store does it in the same
transaction; the notification here updates the Slack message that offered Approve). A move the state machine
does not allow raises IllegalTransition naming the state and what is allowed there.

`return_to_service` is the forced return (domain/returns.py): it works in any state in which the remediation
may still hold its node or GPU (`holds_target`), and answers IllegalTransition when it holds nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from remediator.domain.plan_snapshot import playbook_of
from remediator.domain.returns import SKIPS, return_reason
from remediator.domain.states import Event, State, allowed_actions
from remediator.engine.moves import move, notify
from remediator.engine.return_to_service import revert_plan
from remediator.engine.runtime import Runtime
from remediator.errors import IllegalTransition, NothingHeld
from remediator.store.flag_store import OVERRIDE_FLAG_PREFIX
from remediator.store.models import Approval, Remediation

__all__ = ["cancel", "holds_target", "release", "return_to_service", "revert"]

log = logging.getLogger(__name__)

# States in which a remediation holds nothing whatever its steps did (its undo is complete, or it never acted).
_HOLDS_NOTHING = frozenset({State.REVERTED, State.RETURNED, State.PLANNED, State.RELEASED})


def _said(actor: str, reason: str | None) -> str:
    return f"by {actor}: {reason}" if reason else f"by {actor}"


async def holds_target(rt: Runtime, rem: Remediation) -> bool:
    """May this remediation still hold its node or GPU: an undo under way, the node counted quarantined, or a
    forward step that changed something with an undo (a taint, a cordon, a label, a condition, a power limit)
    that no completed undo has taken back."""
    if rem.state in _HOLDS_NOTHING:
        return False
    if rem.state == State.REVERTING or rem.quarantined:
        return True
    try:
        plan = revert_plan(rt.actions, playbook_of(rem), await rt.repo.steps(rem.id))
    except Exception:  # an unreadable playbook snapshot: assume it holds, the undo will say what fails
        log.warning("cannot read the undo plan of %s", rem.id, exc_info=True)
        return True
    return bool(plan)


async def _open_approvals(rt: Runtime, rem_id: str) -> list[Approval]:
    return [a for a in await rt.repo.approvals_of(rem_id) if a.decision is None]


async def _announce_superseded(rt: Runtime, rem_id: str, before: Iterable[Approval], what: str) -> None:
    """Tell the channels (the Slack bot edits the message that offered Approve) which requests were closed."""
    for approval in before:
        fresh = await rt.repo.get_approval(approval.id)
        if fresh is None or fresh.decision != "superseded":
            continue
        when = fresh.decided_at.strftime("%Y-%m-%d %H:%M:%SZ") if fresh.decided_at else "now"
        await notify(rt, rem_id, "approval_superseded",
                     f"The approval request for step *{fresh.step_name}* was superseded: {what} by "
                     f"{fresh.decided_by} at {when}. There is nothing left to approve.")


async def cancel(rt: Runtime, rem_id: str, *, actor: str, reason: str) -> Remediation:
    """Stop a remediation where it is (nothing is undone); its open approval requests are superseded."""
    before = await _open_approvals(rt, rem_id)
    rem = await move(rt, rem_id, Event.CANCEL, reason=f"cancelled {_said(actor, reason)}", actor=actor,
                     data={"by": actor, "reason": reason})
    await _announce_superseded(rt, rem_id, before, "cancelled")
    return rem


async def revert(rt: Runtime, rem_id: str, *, actor: str, reason: str | None) -> Remediation:
    """Undo what a finished remediation did (its return gate first). Refused with a pointer to `return` where
    the state allows that instead (a running remediation, one awaiting approval or an undo under way)."""
    try:
        return await move(rt, rem_id, Event.REVERT, reason=f"revert requested {_said(actor, reason)}",
                          actor=actor, data={"by": actor, "reason": reason})
    except IllegalTransition as exc:
        if "return" in exc.allowed:
            raise _PointAtReturn(exc) from None
        raise


class _PointAtReturn(IllegalTransition):
    """A refused revert where a forced return would do: the message says so."""

    def __init__(self, refused: IllegalTransition) -> None:
        super().__init__(refused.state, refused.event, refused.allowed)
        self.args = (f"{refused}; to put its node back in service now, use `return` "
                     "(remediator return ID --reason TEXT [--skip-reboot] [--skip-validation])",)

    def __str__(self) -> str:
        return str(self.args[0])


async def release(rt: Runtime, rem_id: str, *, actor: str, reason: str | None) -> Remediation:
    """Let a held remediation past the flapping and repeat-offender holds (not the breaker): back to pending,
    its admission honouring the override."""
    rem = await rt.repo.get(rem_id)
    if rem is None:
        raise KeyError(rem_id)
    if rem.state != State.HELD:
        raise IllegalTransition(rem.state, Event.RELEASE, allowed_actions(rem.state))
    await rt.repo.set_flag(
        f"{OVERRIDE_FLAG_PREFIX}{rem_id}", {"by": actor, "reason": reason}, audit_kind="guardrail.override",
        actor=actor,
    )
    return await move(rt, rem_id, Event.RELEASE, reason=f"released {_said(actor, reason)}", actor=actor,
                      data={"by": actor, "reason": reason})


async def return_to_service(
    rt: Runtime, rem_id: str, *, actor: str, reason: str, skip: Iterable[str] = ()
) -> Remediation:
    """The forced return: stop what remains and run the undo that returns the node (skipping the named gate
    steps), ending `returned`. IllegalTransition (NothingHeld) when the remediation holds nothing."""
    skips = sorted(set(skip))
    unknown = [s for s in skips if s not in SKIPS]
    if unknown:
        raise ValueError(f"skip: unknown {', '.join(unknown)}; one of {', '.join(SKIPS)}")
    rem = await rt.repo.get(rem_id)
    if rem is None:
        raise KeyError(rem_id)
    if not await holds_target(rt, rem):
        raise NothingHeld(rem.state, tuple(a for a in allowed_actions(rem.state) if a != Event.RETURN))
    before = await _open_approvals(rt, rem_id)
    rem = await rt.repo.start_return(rem_id, actor=actor, reason=reason, skip=skips, from_state=rem.state)
    await notify(rt, rem_id, "return_requested", return_reason(actor, reason, skips))
    await _announce_superseded(rt, rem_id, before, "returned to service")
    return rem

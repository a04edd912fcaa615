"""What a remediation's approval request decided. The decision is stored once, on the request (`Approval`);
the executor, the API and the UI read it from there through these functions.

An expired request means what the playbook's `on_expiry` said when the remediation started (the playbook
snapshot in its plan): `abort` ends the remediation in `expired`; `continue` runs the gated step as if
approved, so for such a playbook an expired request reads as `approved`.

A request's status has one vocabulary wherever it is shown (API, CLI, UI), `approval_status`: `pending`
(waiting for a decision), `approved`, `rejected`, `expired`, `superseded` (a later wait replaced it) and
`closed` (the remediation stopped waiting without a decision, e.g. it was cancelled).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from remediator.domain.plan_snapshot import stored_playbook_field
from remediator.domain.states import State
from remediator.store.models import Approval, Remediation

__all__ = ["APPROVAL_STATUSES", "ApprovalStatus", "approval_status", "decision_of", "on_expiry", "step_approved"]

ApprovalStatus = Literal["pending", "approved", "rejected", "expired", "superseded", "closed"]
APPROVAL_STATUSES: tuple[ApprovalStatus, ...] = ("pending", "approved", "rejected", "expired", "superseded", "closed")


def approval_status(approval: Approval, rem: Remediation, now: datetime) -> ApprovalStatus:
    """What a request stands at: its stored decision, else `expired` past its expiry, `pending` while its
    remediation waits for it, `closed` once it no longer does."""
    for known in APPROVAL_STATUSES:
        if approval.decision == known:
            return known
    if approval.expires_at <= now:
        return "expired"
    return "pending" if rem.state == State.AWAITING_APPROVAL else "closed"


def on_expiry(rem: Remediation) -> str:
    """`abort` (the default) or `continue`: what an unanswered request of this remediation leads to."""
    return str(stored_playbook_field(rem.plan, "on_expiry") or "abort")


def decision_of(rem: Remediation, approval: Approval | None) -> str | None:
    """The decision of `approval` (a request of `rem`): approved, rejected, expired, superseded, or None
    while it is open or when there is no request; an expiry the playbook treats as consent is `approved`."""
    if approval is None:
        return None
    if approval.decision == "expired" and on_expiry(rem) == "continue":
        return "approved"
    return approval.decision


def step_approved(rem: Remediation, approval: Approval | None, index: int) -> bool:
    """May step `index` run without asking again: the newest request was about it and let it run?"""
    return approval is not None and approval.step_index == index and decision_of(rem, approval) == "approved"

"""The remediation state machine as an explicit table (pure). Any move not listed raises IllegalTransition.

    pending ──start──> running ──succeed──> succeeded ──revert──> reverting ──reverted──> reverted
       │  ╲              │ ╲──fail──> failed ──revert──> reverting      └──revert_failed──> failed
       │   hold          │  await_approval──> awaiting_approval ──approve──> running
       │    ╲            │                          ├──reject──> rejected
       │     held <─hold─┘                          └──expire──> expired
       │      └─release──> pending
       └──cancel (also from held, awaiting_approval, running, reverting)──> cancelled
    crash (from pending, held, running, reverting: the driver failed unexpectedly MAX_CRASHES times)──> failed

Cancelling an undo (`reverting` --cancel--> `cancelled`) stops it before its next step and leaves the target
as it is at that moment; a revert can be requested again later (`cancelled` --revert--> `reverting`).
"""

from __future__ import annotations

from typing import Final

from remediator.errors import IllegalTransition

__all__ = [
    "ACTIVE_STATES",
    "EVENTS",
    "FINAL_STATES",
    "STATES",
    "TRANSITIONS",
    "is_active",
    "next_state",
    "shown_state",
]

STATES: Final = (
    "pending",
    "held",
    "awaiting_approval",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "rejected",
    "expired",
    "reverting",
    "reverted",
)

TRANSITIONS: Final[dict[tuple[str, str], str]] = {
    ("pending", "start"): "running",
    ("pending", "hold"): "held",
    ("pending", "await_approval"): "awaiting_approval",
    ("pending", "cancel"): "cancelled",
    ("held", "release"): "pending",
    ("held", "cancel"): "cancelled",
    ("held", "hold"): "held",
    ("running", "succeed"): "succeeded",
    ("running", "fail"): "failed",
    ("running", "hold"): "held",
    ("running", "await_approval"): "awaiting_approval",
    ("running", "cancel"): "cancelled",
    ("awaiting_approval", "approve"): "running",
    ("awaiting_approval", "reject"): "rejected",
    ("awaiting_approval", "expire"): "expired",
    ("awaiting_approval", "cancel"): "cancelled",
    ("succeeded", "revert"): "reverting",
    ("failed", "revert"): "reverting",
    ("cancelled", "revert"): "reverting",
    ("rejected", "revert"): "reverting",
    ("expired", "revert"): "reverting",
    ("reverting", "reverted"): "reverted",
    ("reverting", "revert_failed"): "failed",
    ("reverting", "cancel"): "cancelled",
    ("pending", "crash"): "failed",
    ("held", "crash"): "failed",
    ("running", "crash"): "failed",
    ("reverting", "crash"): "failed",
}

EVENTS: Final = tuple(sorted({event for _, event in TRANSITIONS}))

# States in which the remediation still owns its target (one per target and playbook).
ACTIVE_STATES: Final = frozenset({"pending", "held", "awaiting_approval", "running", "reverting"})
FINAL_STATES: Final = frozenset(set(STATES) - ACTIVE_STATES)


def next_state(state: str, event: str) -> str:
    """The state after `event` in `state`; raises IllegalTransition when the table has no such move."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None


def is_active(state: str) -> bool:
    return state in ACTIVE_STATES


def shown_state(state: str, reason: str | None) -> str:
    """The state a person reads: `planned` for a plan-only run that finished without changing anything."""
    if state == "succeeded" and (reason or "").startswith("plan-only"):
        return "planned"
    return state

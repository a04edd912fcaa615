"""The remediation state machine as an explicit table (pure). Any move not listed raises IllegalTransition.

    pending ──start──> running ──succeed──> succeeded ──revert──> reverting ──reverted──> reverted
       │  ╲              │ ╲──plan──> planned ──revert──> reverting     └──revert_failed──> failed
       │   ╲             │ ╲──fail──> failed ──revert──> reverting
       │   hold          │  await_approval──> awaiting_approval ──approve──> running
       │    ╲            │                          ├──reject──> rejected
       │     held <─hold─┘                          └──expire──> expired
       │      └─release──> pending
       └──cancel (also from held, awaiting_approval, running, reverting)──> cancelled
    crash (from pending, held, running, reverting: the driver failed unexpectedly MAX_CRASHES times)──> failed

Cancelling an undo (`reverting` --cancel--> `cancelled`) stops it before its next step and leaves the target
as it is at that moment; a revert can be requested again later (`cancelled` --revert--> `reverting`).

`planned` is where a plan-only run ends (no cluster credentials, or DRY_RUN): every step was described and
recorded, nothing was changed. It is its own stored state, so the API, the CLI, the UI, the metrics and the
`?state=` filter all read the same name; otherwise it behaves like `succeeded` (final, can be reverted).

`return` is a person's forced return to service (`remediator return`, `POST .../return`): from any state in
which the remediation may still hold its node or GPU it moves to `reverting` with the return recorded on the
row (who, why, which gate steps to skip: domain/returns.py); the undo then runs as a revert does, skipping the
named gate steps, and ends in `returned` (`reverting` --returned--> `returned`) instead of `reverted`. Whether
a remediation still holds anything is decided from its steps, not here (the API answers 409 when it holds
nothing).

`released` is where a remediation ends when a person lifted its quarantine by hand (an uncordon, or the
project's taint removed, seen by the node watch: engine/hand_changes.py): from any state in which it may
still hold its node (`hand_changed`), the controller lets go: the hand change is audited with the field
manager that made it, the project's labels and condition are cleaned up, and nothing is applied again.

`ACTIONS` are the moves a person asks for through the API, the CLI or the UI; `allowed_actions(state)` names
those the table allows in a state, for the 409 that refuses one.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final, Protocol

from remediator.errors import IllegalTransition

__all__ = [
    "ACTIONS",
    "ACTIVE_STATES",
    "EVENTS",
    "FINAL_STATES",
    "RETURNED_STATES",
    "STATES",
    "TRANSITIONS",
    "Ended",
    "Event",
    "State",
    "allowed_actions",
    "is_active",
    "next_state",
    "phase_of",
    "returned_at",
    "shown_state",
]

class State(StrEnum):
    """A remediation's state. Members compare equal to their stored strings."""

    PENDING = "pending"
    HELD = "held"
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    PLANNED = "planned"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"
    EXPIRED = "expired"
    REVERTING = "reverting"
    REVERTED = "reverted"
    RETURNED = "returned"
    RELEASED = "released"


class Event(StrEnum):
    """What moves a remediation from one state to another."""

    START = "start"
    HOLD = "hold"
    RELEASE = "release"
    AWAIT_APPROVAL = "await_approval"
    APPROVE = "approve"
    REJECT = "reject"
    EXPIRE = "expire"
    SUCCEED = "succeed"
    PLAN = "plan"
    FAIL = "fail"
    CANCEL = "cancel"
    REVERT = "revert"
    REVERTED = "reverted"
    REVERT_FAILED = "revert_failed"
    RETURN = "return"
    RETURNED = "returned"
    HAND_CHANGED = "hand_changed"
    CRASH = "crash"


STATES: Final[tuple[State, ...]] = tuple(State)

TRANSITIONS: Final[dict[tuple[State, Event], State]] = {
    (State.PENDING, Event.START): State.RUNNING,
    (State.PENDING, Event.HOLD): State.HELD,
    (State.PENDING, Event.AWAIT_APPROVAL): State.AWAITING_APPROVAL,
    (State.PENDING, Event.CANCEL): State.CANCELLED,
    (State.HELD, Event.RELEASE): State.PENDING,
    (State.HELD, Event.CANCEL): State.CANCELLED,
    (State.HELD, Event.HOLD): State.HELD,
    (State.RUNNING, Event.SUCCEED): State.SUCCEEDED,
    (State.RUNNING, Event.PLAN): State.PLANNED,
    (State.RUNNING, Event.FAIL): State.FAILED,
    (State.RUNNING, Event.HOLD): State.HELD,
    (State.RUNNING, Event.AWAIT_APPROVAL): State.AWAITING_APPROVAL,
    (State.RUNNING, Event.CANCEL): State.CANCELLED,
    (State.AWAITING_APPROVAL, Event.APPROVE): State.RUNNING,
    (State.AWAITING_APPROVAL, Event.REJECT): State.REJECTED,
    (State.AWAITING_APPROVAL, Event.EXPIRE): State.EXPIRED,
    (State.AWAITING_APPROVAL, Event.CANCEL): State.CANCELLED,
    (State.SUCCEEDED, Event.REVERT): State.REVERTING,
    (State.PLANNED, Event.REVERT): State.REVERTING,
    (State.FAILED, Event.REVERT): State.REVERTING,
    (State.CANCELLED, Event.REVERT): State.REVERTING,
    (State.REJECTED, Event.REVERT): State.REVERTING,
    (State.EXPIRED, Event.REVERT): State.REVERTING,
    (State.REVERTING, Event.REVERTED): State.REVERTED,
    (State.REVERTING, Event.REVERT_FAILED): State.FAILED,
    (State.REVERTING, Event.CANCEL): State.CANCELLED,
    (State.PENDING, Event.CRASH): State.FAILED,
    (State.HELD, Event.CRASH): State.FAILED,
    (State.RUNNING, Event.CRASH): State.FAILED,
    (State.REVERTING, Event.CRASH): State.FAILED,
    # A person's forced return to service (see the module docstring).
    **{(state, Event.RETURN): State.REVERTING for state in (
        State.PENDING, State.HELD, State.AWAITING_APPROVAL, State.RUNNING, State.SUCCEEDED, State.FAILED,
        State.CANCELLED, State.REJECTED, State.EXPIRED, State.REVERTING,
    )},
    (State.REVERTING, Event.RETURNED): State.RETURNED,
    # A person lifted the quarantine by hand (see the module docstring).
    **{(state, Event.HAND_CHANGED): State.RELEASED for state in (
        State.PENDING, State.HELD, State.AWAITING_APPROVAL, State.RUNNING, State.SUCCEEDED, State.FAILED,
        State.CANCELLED, State.REJECTED, State.EXPIRED, State.REVERTING,
    )},
}

EVENTS: Final[tuple[Event, ...]] = tuple(sorted({event for _, event in TRANSITIONS}))

# States in which the remediation still owns its target (one per target and playbook).
ACTIVE_STATES: Final[frozenset[State]] = frozenset(
    {State.PENDING, State.HELD, State.AWAITING_APPROVAL, State.RUNNING, State.REVERTING}
)
FINAL_STATES: Final[frozenset[State]] = frozenset(set(STATES) - ACTIVE_STATES)
# Final states that end a run without an error: a target left in them (and not quarantined) is back in service.
RETURNED_STATES: Final[frozenset[State]] = frozenset({State.SUCCEEDED, State.PLANNED, State.RETURNED})

# The moves a person asks for (API, CLI, UI), in the order they are listed.
ACTIONS: Final[tuple[Event, ...]] = (
    Event.APPROVE, Event.REJECT, Event.CANCEL, Event.RELEASE, Event.REVERT, Event.RETURN,
)


def allowed_actions(state: str) -> tuple[str, ...]:
    """The actions (of ACTIONS) the transition table allows in `state`; empty for an unknown state."""
    return tuple(str(event) for event in ACTIONS if (state, event) in TRANSITIONS)


def next_state(state: str, event: str) -> State:
    """The state after `event` in `state`; raises IllegalTransition when the table has no such move."""
    try:
        return TRANSITIONS[(State(state), Event(event))]
    except (KeyError, ValueError):
        raise IllegalTransition(str(state), str(event), allowed_actions(state)) from None


def is_active(state: str) -> bool:
    return state in ACTIVE_STATES


def phase_of(state: str) -> str:
    """Which way a remediation's steps go: `revert` while it undoes them and once it has, else `forward`."""
    return "revert" if state in (State.REVERTING, State.REVERTED) else "forward"


def shown_state(state: str, reason: str | None) -> str:
    """The state a person reads: the stored one. A row written before `planned` was a state of its own (a
    plan-only run ended `succeeded` with a `plan-only` reason) still reads `planned`."""
    if state == State.SUCCEEDED and (reason or "").startswith("plan-only"):
        return State.PLANNED
    return state


class Ended(Protocol):
    """What `returned_at` reads of a remediation (a store row, a replayed one, a report's view of one)."""

    @property
    def state(self) -> str: ...

    @property
    def quarantined(self) -> bool: ...

    @property
    def finished_at(self) -> datetime | None: ...


def returned_at(rem: Ended) -> datetime | None:
    """When the remediation gave its target back to service (reverted, or ended `succeeded`, `planned` or
    `returned` without a quarantine in force), or None when it has not. The ladder's recurrence and the
    effectiveness report both read it."""
    if rem.finished_at is None:
        return None
    if rem.state == State.REVERTED or (rem.state in RETURNED_STATES and not rem.quarantined):
        return rem.finished_at
    return None

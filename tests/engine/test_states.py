"""The transition table: legal moves work, anything else raises, and no event sequence escapes the states."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediator.engine.states import ACTIVE_STATES, EVENTS, FINAL_STATES, STATES, TRANSITIONS, next_state
from remediator.errors import IllegalTransition


def test_contract_states_are_exactly_these() -> None:
    assert set(STATES) == {
        "pending", "held", "awaiting_approval", "running", "succeeded", "failed", "cancelled", "rejected",
        "expired", "reverting", "reverted",
    }
    assert set(STATES) == ACTIVE_STATES | FINAL_STATES
    assert not ACTIVE_STATES & FINAL_STATES


def test_happy_path_and_revert() -> None:
    state = "pending"
    for event in ("start", "await_approval", "approve", "succeed", "revert", "reverted"):
        state = next_state(state, event)
    assert state == "reverted"


@pytest.mark.parametrize(("state", "event"), [("succeeded", "start"), ("reverted", "revert"), ("pending", "approve"),
                                                ("cancelled", "start"), ("rejected", "approve")])
def test_illegal_moves_raise(state: str, event: str) -> None:
    with pytest.raises(IllegalTransition) as info:
        next_state(state, event)
    assert info.value.state == state and info.value.event == event


def test_nothing_leaves_reverted() -> None:
    assert not [k for k in TRANSITIONS if k[0] == "reverted"]


@given(st.lists(st.sampled_from(EVENTS), max_size=60))
def test_no_sequence_reaches_an_unknown_state(events: list[str]) -> None:
    state = "pending"
    for event in events:
        try:
            new = next_state(state, event)
        except IllegalTransition:
            assert (state, event) not in TRANSITIONS
            continue
        assert new in STATES
        assert (state, event) in TRANSITIONS
        state = new

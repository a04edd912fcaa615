"""The transition table: legal moves work, anything else raises, and no event sequence escapes the states."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediator.domain.states import ACTIVE_STATES, EVENTS, FINAL_STATES, STATES, TRANSITIONS, next_state
from remediator.errors import IllegalTransition


def test_contract_states_are_exactly_these() -> None:
    """CONTRACT's eleven states, plus the project's own: `planned` (where a plan-only run ends) and `returned`
    (a person's forced return to service)."""
    contract = {
        "pending", "held", "awaiting_approval", "running", "succeeded", "failed", "cancelled", "rejected",
        "expired", "reverting", "reverted",
    }
    assert contract <= set(STATES)
    assert "planned" in set(STATES) - contract <= {"planned", "returned", "released"}
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


def _reachable(start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        state = todo.pop()
        for (source, _), target in TRANSITIONS.items():
            if source == state and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_every_state_is_reachable_and_every_active_state_can_end() -> None:
    assert _reachable("pending") == set(STATES)
    for state in ACTIVE_STATES:
        assert _reachable(state) & FINAL_STATES, f"{state} can never finish"
        assert next_state(state, "cancel") == "cancelled", f"{state} cannot be cancelled by an operator"


def test_the_target_is_handed_back_only_through_an_undo() -> None:
    into_reverted = {source for (source, _), target in TRANSITIONS.items() if target == "reverted"}
    assert into_reverted == {"reverting"}
    into_reverted = {source for (source, _), target in TRANSITIONS.items() if target == "returned"}
    assert into_reverted == {"reverting"}
    reverts = {source for (source, event), target in TRANSITIONS.items() if target == "reverting" and event == "revert"}
    assert reverts <= FINAL_STATES  # a plain undo starts only once the forward run has ended
    # A person's forced return starts from any state that may still hold the node, and from nothing else.
    into_reverting = {(source, event) for (source, event), target in TRANSITIONS.items() if target == "reverting"}
    assert {event for _, event in into_reverting} == {"revert", "return"}
    returns = {source for source, event in into_reverting if event == "return"}
    assert returns == set(STATES) - {"planned", "reverted", "returned", "released"}
    assert "returned" in FINAL_STATES and not any(source == "returned" for source, _ in TRANSITIONS)



def test_a_hand_change_releases_from_every_state_that_may_hold_the_node_and_released_is_final() -> None:
    sources = {source for (source, event), target in TRANSITIONS.items() if event == "hand_changed"}
    assert sources == set(STATES) - {"planned", "reverted", "returned", "released"}
    assert {target for (_, event), target in TRANSITIONS.items() if event == "hand_changed"} == {"released"}
    assert "released" in FINAL_STATES and not any(source == "released" for source, _ in TRANSITIONS)

@given(st.lists(st.sampled_from(EVENTS), max_size=60))
def test_a_random_walk_never_deadlocks_in_an_active_state(events: list[str]) -> None:
    """Whatever legal moves happen, an active remediation always has a way out (no stuck remediation)."""
    state = "pending"
    for event in events:
        try:
            state = next_state(state, event)
        except IllegalTransition:
            continue
        if state in ACTIVE_STATES:
            assert any(source == state for source, _ in TRANSITIONS), state
            assert _reachable(state) & FINAL_STATES


def test_a_plan_only_run_ends_planned_and_can_be_reverted() -> None:
    assert next_state("running", "plan") == "planned"
    assert next_state("planned", "revert") == "reverting"
    assert "planned" in FINAL_STATES


@pytest.mark.parametrize(("state", "event", "message"), [
    ("running", "revert", "cannot revert a remediation that is running; allowed in running: cancel"),
    ("succeeded", "cancel", "cannot cancel a remediation that is succeeded; allowed in succeeded: revert"),
    ("planned", "cancel", "cannot cancel a remediation that is planned; allowed in planned: revert"),
    ("reverted", "revert", "cannot revert a remediation that is reverted; nothing can be done in reverted"),
    ("awaiting_approval", "release",
     "cannot release a remediation that is awaiting_approval; allowed in awaiting_approval: approve, reject, cancel"),
])
def test_a_refused_move_names_the_state_and_what_it_allows(state: str, event: str, message: str) -> None:
    """Said to the person who asked (409): never an enum's repr such as <Event.REVERT: 'revert'>."""
    from remediator.domain.states import Event

    with pytest.raises(IllegalTransition) as info:
        next_state(state, Event(event))
    assert str(info.value).startswith(message)
    assert "Event." not in str(info.value) and "State." not in str(info.value)

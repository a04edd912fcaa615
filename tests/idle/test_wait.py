"""The `wait` action: it defers instead of sleeping, keeps its start across runs, and cancels on resolve."""

from __future__ import annotations

import pytest

from remediator.actions.wait import Wait
from remediator.errors import CancelRemediation, ResumeLater
from tests.idle.conftest import Checkpoints, MakeCtx


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_waits_by_deferring_and_finishes_when_the_time_is_up(make_ctx: MakeCtx) -> None:
    clock, checkpoints = Clock(), Checkpoints()
    action = Wait(clock=clock)
    params = action.parse({"duration": "2h", "poll": "5m"})

    with pytest.raises(ResumeLater) as later:
        await action.run(await make_ctx(None, None, context={}, checkpoints=checkpoints), params)
    assert later.value.delay == 300

    clock.now += 7100  # a restart in between: the start time comes from the checkpoint
    with pytest.raises(ResumeLater) as later:
        await action.run(await make_ctx(None, None, context={}, progress=checkpoints.last), params)
    assert later.value.delay == pytest.approx(100)

    clock.now += 100
    result = await action.run(await make_ctx(None, None, context={}, progress=checkpoints.last), params)
    assert result.output["resolved"] is False and not result.changed


async def test_a_resolved_alert_cancels(make_ctx: MakeCtx) -> None:
    clock, checkpoints = Clock(), Checkpoints()
    action = Wait(clock=clock)
    params = action.parse({"duration": "2h", "undo": False})
    with pytest.raises(ResumeLater):
        await action.run(await make_ctx(None, None, context={}, checkpoints=checkpoints), params)
    clock.now += 600
    ctx = await make_ctx(None, None, context={}, progress=checkpoints.last, resolved=lambda: True)
    with pytest.raises(CancelRemediation) as cancel:
        await action.run(ctx, params)
    assert "resolved" in cancel.value.reason and cancel.value.revert is False
    assert cancel.value.output["waited_seconds"] == 600


def test_durations_are_checked() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        Wait().parse({"duration": "soon"})

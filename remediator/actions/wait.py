"""The `wait` step: give the owner time, and cancel the remediation if the alert resolves meanwhile.

A wait of hours must not hold one of the worker's slots, so the action never sleeps long: each run checks
whether the alert has resolved and, while time remains, raises `ResumeLater`; the executor then releases
the remediation and the worker claims it again after the delay (`poll`, or what remains if shorter).
The start time is checkpointed on the first run, so restarts and other replicas continue the same wait.
When the alert has resolved the action raises `CancelRemediation`, which the executor turns into the
`cancel` transition (and, with `undo`, a revert of the steps done so far).

These are signals, not errors: they are not `ActionError`s, so no retry or failure path sees them. So is
`GateUnknown`, the `ResumeLater` of a validation gate that could not reach a verdict.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

from remediator.actions.base import Action, ActionContext, ActionResult, StrictParams, Target, planned
from remediator.domain.durations import DurationText, format_duration, parse_duration
from remediator.errors import CancelRemediation, ResumeLater

__all__ = ["Wait", "WaitParams"]


class WaitParams(StrictParams):
    duration: DurationText = "2h"
    poll: DurationText = "5m"
    undo: bool = True


class Wait(Action[WaitParams]):
    """Wait `duration`; end early and cancel the remediation if the alert resolves."""

    name = "wait"
    Params = WaitParams
    mutating = False

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    async def plan(self, ctx: ActionContext, params: WaitParams) -> ActionResult:
        """A dry run still cancels when the alert has resolved; otherwise it only says it would wait."""
        await self._waited(ctx, params)
        return planned(f"would wait {params.duration}")

    async def apply(self, ctx: ActionContext, params: WaitParams) -> ActionResult:
        p = params
        total = parse_duration(p.duration).total_seconds()
        poll = max(0.001, parse_duration(p.poll).total_seconds())
        waited = await self._waited(ctx, p)
        remaining = total - waited
        if remaining > 0:
            raise ResumeLater(min(remaining, poll), f"waiting: {format_duration(_seconds(remaining))} left")
        return ActionResult(
            changed=False,
            message=f"waited {p.duration}; the alert is still firing",
            output={"waited_seconds": round(waited, 3), "resolved": False},
        )

    async def _waited(self, ctx: ActionContext, p: WaitParams) -> float:
        """Seconds waited since the first run (checkpointed); cancels the remediation if the alert resolved."""
        started = ctx.progress.get("started_at")
        if not isinstance(started, int | float):
            started = float(self._clock())
            ctx.progress["started_at"] = started
            await ctx.checkpoint(dict(ctx.progress))
        waited = max(0.0, float(self._clock()) - started)
        if await ctx.alert_resolved():
            raise CancelRemediation(
                f"the alert resolved during the wait (after {format_duration(_seconds(waited))})",
                revert=p.undo,
                output={"waited_seconds": round(waited, 3), "resolved": True},
            )
        return waited

    def describe(self, target: Target, params: WaitParams) -> str:
        return f"wait {params.duration} for the alert on {target.key} to resolve (then cancel)"


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=round(value, 3))

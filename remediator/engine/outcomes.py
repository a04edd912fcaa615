"""Counting what each remediation achieved, as it becomes known (remediator_remediation_outcomes_total).

`escalated` and `recurred` are known the moment they happen (the ladder counts them). `healed` is known only
when a remediation's recurrence window has passed without another fault of the same GPU, so a sweep, run
every few minutes by the worker, counts the remediations whose window ended since the previous sweep. The
first sweep after a start counts nothing older than the start: a restart may miss a few `healed` at its
boundary but never counts one twice. The effectiveness report recomputes everything from the store and is
the authority; the counter is for dashboards and alerts.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from remediator.engine.effectiveness import assess
from remediator.engine.idle_report import read_remediation_facts
from remediator.engine.runtime import Runtime

__all__ = ["OutcomeSweep"]


class OutcomeSweep:
    """Counts `healed` remediations once each, when their recurrence window ends."""

    def __init__(self, rt: Runtime, *, every: timedelta = timedelta(minutes=5)) -> None:
        self.rt = rt
        self.every = every
        self._last: datetime | None = None

    async def maybe_sweep(self) -> int:
        """Sweep when `every` has passed since the previous sweep; how many were counted healed."""
        now = self.rt.clock()
        if self._last is None:
            self._last = now
            return 0
        if now - self._last < self.every:
            return 0
        return await self.sweep(now)

    async def sweep(self, now: datetime) -> int:
        since, self._last = self._last or now, now
        window = self.rt.settings.recurrence_window
        facts = await read_remediation_facts(self.rt.repo, now - window - timedelta(days=8))
        healed = 0
        for assessment in assess(facts, window=window, now=now):
            back = assessment.returned_at
            if assessment.outcome != "healed" or back is None:
                continue
            ended = back + window
            if since.tzinfo is not None and ended.tzinfo is None:
                ended = ended.replace(tzinfo=since.tzinfo)
            if since <= ended < now:
                self.rt.metrics.remediation_outcomes.labels(playbook=assessment.playbook, outcome="healed").inc()
                healed += 1
        return healed

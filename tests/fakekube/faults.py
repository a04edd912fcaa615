"""Fault injection for the fake apiserver: throttling, server errors, slow answers and outages on a schedule.

A real API server under load answers 429 with Retry-After (API Priority and Fairness), fails with 5xx during
an etcd or apiserver rollout, is slow, or cannot be reached at all. Tests schedule these per verb, resource
and path pattern, for a window of real time, with a probability drawn from a seeded RNG (so a run can be
repeated); the fake records which calls were answered by a fault (`Call.injected`) and when every request
arrived (`Call.at`, monotonic seconds), so a test can assert that no request came sooner than the
Retry-After it was given. Refused connections are not a fault of a request: `FakeKube.outage` stops
listening for a window.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from dataclasses import dataclass, field

import kmock

__all__ = ["Fault", "Faults"]

_REASONS = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected by the test"),
    502: ("BadGateway", "Bad gateway: injected by the test"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", "The server was unable to return a response in the time allotted"),
}


@dataclass
class Fault:
    """From `start` to `end` (monotonic seconds), answer matching requests with `status` (and Retry-After
    `retry_after` seconds) with probability `probability`, after sleeping `delay` seconds. `status` None:
    only the delay. Matching: `verb` (get list watch create update patch delete evict), `plural`, and a
    regular expression searched in the path; None matches anything."""

    start: float
    end: float
    status: int | None = 429
    retry_after: int | None = None
    delay: float = 0.0
    probability: float = 1.0
    verb: str | None = None
    plural: str | None = None
    path: str | None = None
    fired: int = field(default=0)

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in _REASONS:
            raise ValueError(f"fault status must be one of {sorted(_REASONS)}, not {self.status}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError("fault probability must be within 0..1")
        if self.delay < 0 or self.end < self.start:
            raise ValueError("fault delay must be >= 0 and its window must not end before it starts")
        if self.path is not None:
            re.compile(self.path)

    def matches(self, verb: str, plural: str | None, path: str, now: float) -> bool:
        return (
            self.start <= now < self.end
            and (self.verb is None or self.verb == verb)
            and (self.plural is None or self.plural == plural)
            and (self.path is None or re.search(self.path, path) is not None)
        )


class Faults:
    """The schedule of one fake server; `seed` makes the probabilistic faults repeatable."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.scheduled: list[Fault] = []

    def add(
        self,
        status: int | None = 429,
        *,
        after: float = 0.0,
        duration: float = math.inf,
        retry_after: int | None = None,
        delay: float = 0.0,
        probability: float = 1.0,
        verb: str | None = None,
        plural: str | None = None,
        path: str | None = None,
    ) -> Fault:
        """Schedule a fault starting `after` seconds from now, for `duration` seconds."""
        start = time.monotonic() + after
        fault = Fault(start, start + duration, status, retry_after, delay, probability, verb, plural, path)
        self.scheduled.append(fault)
        return fault

    def clear(self) -> None:
        self.scheduled.clear()

    async def apply(self, verb: str, plural: str | None, path: str) -> int | None:
        """Delay and/or raise the first matching fault's answer; its status when one was raised."""
        now = time.monotonic()
        for fault in self.scheduled:
            if not fault.matches(verb, plural, path, now) or self.rng.random() >= fault.probability:
                continue
            fault.fired += 1
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.status is None:
                return None
            reason, message = _REASONS[fault.status]
            details = {"retryAfterSeconds": fault.retry_after} if fault.retry_after else {}
            raise kmock.KubernetesError(status=fault.status, reason=reason, message=message, details=details)
        return None

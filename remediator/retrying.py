"""The retry policies of the controller, in one place: optimistic writes, and transient failures of a peer.

Conflicts. A Kubernetes write guarded by resourceVersion answers 409 when the object changed since it was
read; a database insert guarded by a unique key fails when another replica inserted first. Both are retried
a few times at once (the other writer is done, not busy), through tenacity (`on_conflict`). When the
attempts run out the caller raises a permanent error.

Transient failures. Every adapter classifies its peer's failures once (remediator/errors.py): a connection
refused or reset, a timeout, 429 and 5xx are `TemporaryError`s naming their `dependency`; anything else is
permanent. A step, and the context read before the first step, is retried on transient errors within a time
budget, not a count (`TransientPolicy`, modelled on client-go's and controller-runtime's rate limiters):
exponential backoff with full jitter, capped low so that an outage's end is noticed within seconds, and
never sooner than the peer's Retry-After. When the budget runs out the caller is told `DependencyWaiting`:
the remediation waits for the dependency and runs the step again later; it is not failed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from remediator.errors import Conflict, RemediatorError, TemporaryError

__all__ = [
    "CONFLICT_ATTEMPTS",
    "CONTEXT_READ_FAILED",
    "DEPENDENCIES",
    "WAITING_PREFIX",
    "Backoff",
    "DependencyWaiting",
    "TransientPolicy",
    "dependency_of",
    "is_transient",
    "on_conflict",
    "waiting_reason",
]

CONFLICT_ATTEMPTS: Final = 5
# A remediation's state reason while it waits for a dependency starts with this (the fleet page and the
# `remediator_remediations_waiting` gauge read it).
WAITING_PREFIX: Final = "waiting: "
UNKNOWN_DEPENDENCY: Final = "a dependency"
# The state reason of a remediation ended because a permanent error kept its context from being read, before
# any step (store/redelivery.py reads it: such a remediation did not run).
CONTEXT_READ_FAILED: Final = "reading the context failed: "
# The dependencies a remediation can wait for, as the adapters name them (remediator_remediations_waiting).
DEPENDENCIES: Final = ("kubernetes API", "node agent")

T = TypeVar("T")


def on_conflict(
    exc: type[BaseException] | tuple[type[BaseException], ...], attempts: int = CONFLICT_ATTEMPTS
) -> AsyncRetrying:
    """Retry the block right away while it raises `exc`, at most `attempts` times; then re-raise the last."""
    return AsyncRetrying(stop=stop_after_attempt(attempts), retry=retry_if_exception_type(exc), reraise=True)


def is_transient(exc: BaseException) -> bool:
    """A failure that waiting can fix: a TemporaryError other than a 409 (conflicts have `on_conflict`)."""
    return isinstance(exc, TemporaryError) and not isinstance(exc, Conflict)


def dependency_of(exc: BaseException) -> str:
    """The peer that failed (set by the adapter that classified the error)."""
    return str(getattr(exc, "dependency", None) or UNKNOWN_DEPENDENCY)


def _symptom(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return f"answering {status}" if status else "unreachable"


def waiting_reason(exc: BaseException, since: datetime) -> str:
    """`waiting: kubernetes API answering 429 since 12:01:03Z`: which dependency, how, and since when."""
    at = since.astimezone(UTC).strftime("%H:%M:%SZ")
    return f"{WAITING_PREFIX}{dependency_of(exc)} {_symptom(exc)} since {at}"


class DependencyWaiting(RemediatorError):
    """A transient failure outlasted its budget: wait for the dependency, do not fail.

    `error` is the last transient error, `since` when the failures began (UTC)."""

    def __init__(self, error: BaseException, since: datetime) -> None:
        self.error = error
        self.since = since
        self.dependency = dependency_of(error)
        self.reason = waiting_reason(error, since)
        super().__init__(f"{self.reason}: {error}")


@dataclass
class Backoff:
    """Waits between retries of one failing call: exponential with full jitter, capped, never under the peer's
    Retry-After. The exponent counts consecutive failures of the same kind, so a different failure (the API
    is back and a PodDisruptionBudget answers 429 instead of the connection being refused) starts low again.
    """

    base: float = 0.5
    cap: float = 5.0
    rng: random.Random = field(default_factory=random.Random)
    jitter: bool = True  # False: exactly base, 2*base, 4*base ... (a PodDisruptionBudget's 429 without Retry-After)
    _streak: int = 0
    _kind: tuple[type[BaseException], int | None] | None = None

    def next(self, exc: BaseException) -> float:
        kind = (type(exc), getattr(exc, "status", None))
        self._streak = self._streak + 1 if kind == self._kind else 1
        self._kind = kind
        ceiling = min(self.cap, self.base * 2 ** min(self._streak - 1, 30))
        wait = self.rng.uniform(0, ceiling) if self.jitter else ceiling
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after > 0:
            wait = max(wait, float(retry_after))  # never sooner than the peer asked
        return wait

    def reset(self) -> None:
        self._streak, self._kind = 0, None


@dataclass(frozen=True)
class TransientPolicy:
    """Retry transient errors for `budget` seconds (from the first failure), waiting per `Backoff`."""

    budget: float = 300.0
    base: float = 0.5
    cap: float = 5.0

    def __post_init__(self) -> None:
        if self.budget < 0 or self.base <= 0 or self.cap < self.base:
            raise ValueError("a transient policy needs budget >= 0 and 0 < base <= cap")

    async def call(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        on_retry: Callable[[BaseException, float], None] | None = None,
        rng: random.Random | None = None,
    ) -> T:
        """`attempt()`'s result; transient errors retried until the budget is spent, then DependencyWaiting.

        A permanent error (or anything not transient) is raised at once. No wait runs past the budget, except
        that the last wait is never shorter than the peer's Retry-After: the budget ends early instead."""
        loop = asyncio.get_running_loop()
        backoff = Backoff(self.base, self.cap, rng or random.Random())  # noqa: S311 (jitter, not secrets)
        first: float | None = None
        since: datetime | None = None
        while True:
            try:
                return await attempt()
            except BaseException as exc:
                if not is_transient(exc):
                    raise
                now = loop.time()
                if first is None:
                    first, since = now, datetime.now(UTC)
                assert since is not None
                wait = backoff.next(exc)
                if now + wait - first > self.budget:
                    raise DependencyWaiting(exc, since) from exc
                if on_retry is not None:
                    on_retry(exc, wait)
                await asyncio.sleep(wait)

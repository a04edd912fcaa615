"""The retry policies of the controller, in one place: optimistic writes, and transient failures of a peer.

Conflicts. A Kubernetes write guarded by resourceVersion answers 409 when the object changed since it was
read; a database insert guarded by a unique key fails when another replica inserted first. Both are retried
a few times at once (the other writer is done, not busy), through tenacity (`on_conflict`). When the
attempts run out the caller raises a permanent error.

Per call. The node agent client retries a refused or dropped connection a few times with exponential backoff
(`attempts_with_backoff`); a drain retries each eviction on transient errors until its deadline
(`until_deadline`, waits chosen by the drain). tenacity is imported here only (an import-linter contract).

Transient failures. Every adapter classifies its peer's failures once (remediator/errors.py): a connection
refused or reset, a timeout, 429 and 5xx are `TemporaryError`s naming their `dependency`; anything else is
permanent. A step, and the context read before the first step, is retried on transient errors within a time
budget, not a count (`TransientPolicy`, modelled on client-go's and controller-runtime's rate limiters):
exponential backoff with full jitter, capped low so that an outage's end is noticed within seconds, and
never sooner than the peer's Retry-After. When the budget runs out the caller is told `DependencyWaiting`:
the remediation waits for the dependency and runs the step again later; it is not failed.

Notifications (remediator/adapters/notifier.py) use the same policy through `TransientPolicy.run`, with
their own classification and budget, an optional cap on attempts, and Retry-After honoured exactly; when
it is spent they are told `RetriesSpent` (what ended the retries, in words) and record the message failed.
A Retry-After longer than what is left of the budget ends the retries at once: never a request sooner
than the peer asked.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from remediator.errors import Conflict, RemediatorError, TemporaryError

if TYPE_CHECKING:
    from remediator.settings import Settings

__all__ = [
    "CONFLICT_ATTEMPTS",
    "CONTEXT_READ_FAILED",
    "DEPENDENCIES",
    "WAITING_PREFIX",
    "Backoff",
    "DependencyWaiting",
    "RetriesSpent",
    "TransientPolicy",
    "attempts_with_backoff",
    "dependency_of",
    "is_transient",
    "on_conflict",
    "until_deadline",
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


def attempts_with_backoff(
    attempts: int, backoff: float, retry: Callable[[BaseException], bool], *, cap: float = 10.0
) -> AsyncRetrying:
    """Retry the block while it raises what `retry` accepts, at most `attempts` calls, waiting `backoff` s,
    then twice that, ... up to `cap` s; then re-raise the last (the node agent client's calls)."""
    return AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=backoff, max=cap),
        retry=retry_if_exception(retry),
        reraise=True,
    )


def until_deadline(
    left: Callable[[], float],
    wait: Callable[[BaseException], float],
    *,
    after: Callable[[BaseException], None] | None = None,
) -> AsyncRetrying:
    """Retry the block on transient errors (`is_transient`) until `left()` seconds are used up, waiting
    `wait(error)` between calls and telling `after(error)` of each transient failure; then re-raise the last
    (a drain's evictions, each retried until the drain's deadline)."""

    def _wait(state: RetryCallState) -> float:
        exc = _failure(state)
        return 0.0 if exc is None else wait(exc)

    def _after(state: RetryCallState) -> None:
        exc = _failure(state)
        if exc is not None and after is not None:
            after(exc)

    return AsyncRetrying(
        retry=retry_if_exception(is_transient),
        wait=_wait,
        stop=lambda _state: left() <= 0,
        after=_after,
        reraise=True,
    )


def _failure(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome is not None else None


def is_transient(exc: BaseException) -> bool:
    """A failure that waiting can fix: a TemporaryError other than a 409 (conflicts have `on_conflict`)."""
    return isinstance(exc, TemporaryError) and not isinstance(exc, Conflict)


def dependency_of(exc: BaseException) -> str:
    """The peer that failed (set by the adapter that classified the error)."""
    return str(getattr(exc, "dependency", None) or UNKNOWN_DEPENDENCY)


def _symptom(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return f"answering {status}" if status else "unreachable"


def _retry_after_of(exc: BaseException) -> float | None:
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int | float) and not isinstance(retry_after, bool) and retry_after > 0:
        return float(retry_after)
    return None


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


class RetriesSpent(RemediatorError):
    """A transient failure outlasted a policy (`TransientPolicy.run`): its budget or its attempts are spent.

    `error` is the last transient error, `since` when the failures began (UTC), `attempts` the calls made,
    `why` what ended the retries, in words (the budget, a Retry-After past it, the attempt limit)."""

    def __init__(self, error: BaseException, since: datetime, attempts: int, why: str) -> None:
        self.error = error
        self.since = since
        self.attempts = attempts
        self.why = why
        super().__init__(f"{why}: {error}")


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
    exact_retry_after: bool = False  # True: wait exactly the peer's Retry-After when it gave one
    _streak: int = 0
    _kind: tuple[type[BaseException], int | None] | None = None

    def next(self, exc: BaseException) -> float:
        kind = (type(exc), getattr(exc, "status", None))
        self._streak = self._streak + 1 if kind == self._kind else 1
        self._kind = kind
        ceiling = min(self.cap, self.base * 2 ** min(self._streak - 1, 30))
        wait = self.rng.uniform(0, ceiling) if self.jitter else ceiling
        retry_after = _retry_after_of(exc)
        if retry_after is not None:
            # never sooner than the peer asked; exactly what it asked when told so
            wait = retry_after if self.exact_retry_after else max(wait, retry_after)
        return wait

    def reset(self) -> None:
        self._streak, self._kind = 0, None


@dataclass(frozen=True)
class TransientPolicy:
    """Retry transient errors for `budget` seconds (from the first failure), waiting per `Backoff`.

    `attempts` (None: no limit) caps the calls made as well; `exact_retry_after` waits exactly the peer's
    Retry-After when it gave one (otherwise the backoff's wait when longer)."""

    budget: float = 300.0
    base: float = 0.5
    cap: float = 5.0
    attempts: int | None = None
    exact_retry_after: bool = False

    def __post_init__(self) -> None:
        if self.budget < 0 or self.base <= 0 or self.cap < self.base:
            raise ValueError("a transient policy needs budget >= 0 and 0 < base <= cap")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("a transient policy's attempts must be at least 1 (or None: only the budget)")

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
        try:
            return await self.run(attempt, on_retry=on_retry, rng=rng)
        except RetriesSpent as spent:
            raise DependencyWaiting(spent.error, spent.since) from spent.error

    async def run(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        transient: Callable[[BaseException], bool] = is_transient,
        on_retry: Callable[[BaseException, float], None] | None = None,
        rng: random.Random | None = None,
    ) -> T:
        """`attempt()`'s result; errors `transient` accepts retried until the budget or the attempts are
        spent, then RetriesSpent. Anything else is raised at once, unchanged.

        A wait that would end past the budget is never shortened: when the peer's Retry-After (or the
        backoff) reaches beyond what is left, the retries end at once instead of asking sooner."""
        loop = asyncio.get_running_loop()
        rng = rng or random.Random()  # noqa: S311 (jitter, not secrets)
        backoff = Backoff(self.base, self.cap, rng, exact_retry_after=self.exact_retry_after)
        first: float | None = None
        since: datetime | None = None
        calls = 0
        while True:
            calls += 1
            try:
                return await attempt()
            # broad: BaseException so `transient` decides about every error the attempt raises; what it refuses
            # (CancelledError too) is re-raised unchanged
            except BaseException as exc:
                if not transient(exc):
                    raise
                now = loop.time()
                if first is None:
                    first, since = now, datetime.now(UTC)
                assert since is not None
                if self.attempts is not None and calls >= self.attempts:
                    raise RetriesSpent(exc, since, calls, f"at most {self.attempts} attempts allowed") from exc
                wait = backoff.next(exc)
                left = self.budget - (now - first)
                if wait > left:
                    raise RetriesSpent(exc, since, calls, self._spent(exc, wait, left)) from exc
                if on_retry is not None:
                    on_retry(exc, wait)
                await asyncio.sleep(wait)

    def _spent(self, exc: BaseException, wait: float, left: float) -> str:
        left = max(0.0, left)
        retry_after = _retry_after_of(exc)
        if retry_after is not None and retry_after >= wait:
            return (
                f"the peer asked to wait {retry_after:g} s (Retry-After), past the {self.budget:g} s budget "
                f"({left:.1f} s left); not asked sooner"
            )
        return f"the {self.budget:g} s budget is spent ({self.budget - left:.1f} s since the first failure)"


def transient_policy(settings: Settings, retries: int | None = None) -> TransientPolicy:
    """The policy for a step's (and the context read's) transient errors, from the settings. A step with
    `retries: 0` (a long or costly action its playbook does not want run again at once) has no budget: its
    first transient error makes the remediation wait for the dependency, and the step runs again later."""
    budget = 0.0 if retries == 0 else settings.transient_budget_s
    return TransientPolicy(budget=budget, cap=settings.transient_backoff_max_s)

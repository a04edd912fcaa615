"""The one retry policy for optimistic writes: re-read and try again when another writer got in between.

A Kubernetes write guarded by resourceVersion answers 409 when the object changed since it was read; a
database insert guarded by a unique key fails when another replica inserted first. Both are retried a few
times at once (the other writer is done, not busy), through tenacity. When the attempts run out the caller
raises a permanent error, so the step's own retries (engine/executor.py `run_with_retries`, which retry
temporary errors) do not multiply them.
"""

from __future__ import annotations

from typing import Final

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

__all__ = ["CONFLICT_ATTEMPTS", "on_conflict"]

CONFLICT_ATTEMPTS: Final = 5


def on_conflict(
    exc: type[BaseException] | tuple[type[BaseException], ...], attempts: int = CONFLICT_ATTEMPTS
) -> AsyncRetrying:
    """Retry the block right away while it raises `exc`, at most `attempts` times; then re-raise the last."""
    return AsyncRetrying(stop=stop_after_attempt(attempts), retry=retry_if_exception_type(exc), reraise=True)

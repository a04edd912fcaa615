"""What an adapter reports about each write it makes to a peer, so the engine can audit every one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Mutation", "MutationRecorder"]


@dataclass(frozen=True)
class Mutation:
    """One write the controller made (Kubernetes API or node sidecar): verb, object, outcome."""

    verb: str
    resource: str
    namespace: str | None
    name: str
    status: int
    error: str | None = None


MutationRecorder = Callable[[Mutation], Awaitable[None]]

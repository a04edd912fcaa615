"""The project's error tree, in one place so every layer raises and catches the same classes.

    RemediatorError
    ├── ConfigError                 bad settings; the process refuses to start
    │   └── ReplicaGuardError       another controller holds this database's single-replica guard
    ├── DefinitionError             a rule/playbook/catalog problem found at load time (file:line: message)
    │   └── DefinitionSetError      several DefinitionErrors found in one pass
    ├── IllegalTransition           the state machine was asked for a move its table forbids
    ├── StoreUnavailable            the database cannot be reached (the webhook answers 503)
    ├── ApprovalError               unknown, expired, reused or tampered approval token
    └── ActionError                 a step failed at run time
        ├── TemporaryError          worth retrying after `retry_after` seconds (None: backoff decides)
        │   ├── ServiceUnavailable  5xx or connection failure talking to a peer
        │   ├── TooManyRequests     429 (e.g. an eviction blocked by a PodDisruptionBudget)
        │   └── Conflict            409 (stale resourceVersion; re-read and try again)
        └── PermanentError          retrying cannot help
            ├── Unauthorized        401
            ├── Forbidden           403
            ├── NotFound            404
            ├── Invalid             422 / validation of parameters
            ├── NotSupported        the hardware or peer cannot do it (e.g. NVML NOT_SUPPORTED)
            └── StepFailed          the action ran and its goal was not reached (e.g. drain timed out)

Definition errors come from files an SRE edits and always carry a location; action errors come from the
cluster at run time and say whether a retry can help. Adapters translate their library's exceptions into
this tree so the engine never sees a kubernetes, httpx or pynvml exception.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActionError",
    "ApprovalError",
    "ConfigError",
    "Conflict",
    "DefinitionError",
    "DefinitionSetError",
    "Forbidden",
    "IllegalTransition",
    "Invalid",
    "NotFound",
    "NotSupported",
    "PermanentError",
    "RemediatorError",
    "ReplicaGuardError",
    "ServiceUnavailable",
    "StepFailed",
    "StoreUnavailable",
    "TemporaryError",
    "TooManyRequests",
    "Unauthorized",
    "error_for_status",
]


class RemediatorError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(RemediatorError):
    """Settings that cannot work together; the process refuses to start."""


class ReplicaGuardError(ConfigError):
    """Another live controller holds the database's replica guard (or the same REPLICA_ID does)."""


class DefinitionError(RemediatorError):
    """A problem in a definition file, located at file:line (line 0 when unknown)."""

    def __init__(self, file: str, line: int, message: str, path: str = "") -> None:
        self.file = file
        self.line = line
        self.path = path
        self.message = message
        super().__init__(self.render())

    def render(self) -> str:
        where = f" ({self.path})" if self.path else ""
        return f"{self.file}:{self.line}: {self.message}{where}"


class DefinitionSetError(RemediatorError):
    """Several definition problems found in one pass; each keeps its location."""

    def __init__(self, errors: list[DefinitionError]) -> None:
        self.errors = errors
        super().__init__("\n".join(e.render() for e in errors))


class IllegalTransition(RemediatorError):
    """The transition table has no move for (state, event)."""

    def __init__(self, state: str, event: str, allowed: tuple[str, ...] = ()) -> None:
        self.state = str(state)
        self.event = str(event)
        self.allowed = allowed
        then = f"allowed in {self.state}: {', '.join(allowed)}" if allowed else f"nothing can be done in {self.state}"
        super().__init__(f"cannot {self.event} a remediation that is {self.state}; {then}")


class StoreUnavailable(RemediatorError):
    """The database cannot be reached or refused the write.

    `reason`: a short label of the transient failure (store/availability.py), None when not classified."""

    reason: str | None = None


class ApprovalError(RemediatorError):
    """An approval token that is unknown, expired, already used or tampered with."""

    def __init__(self, reason: str, status_code: int = 400) -> None:
        self.reason = reason
        self.status_code = status_code
        super().__init__(reason)


class ActionError(RemediatorError):
    """A step could not do its work at run time.

    `output` is what the step found before it failed (e.g. every check of a failed validation gate); the
    engine stores it as the failed step's output, so the UI, the audit log and later steps can read it.
    """

    retryable = False

    def __init__(
        self, message: str, *, status: int | None = None, details: object = None, output: dict[str, Any] | None = None
    ) -> None:
        self.message = message
        self.status = status
        self.details = details
        self.output = output
        super().__init__(message)


class TemporaryError(ActionError):
    """Worth retrying; `retry_after` seconds when the peer said so. `dependency` names the peer that failed
    ("kubernetes API", "node agent", "Slack"), set by the adapter that classified the failure."""

    retryable = True
    dependency: str | None = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        details: object = None,
        retry_after: float | None = None,
        output: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, status=status, details=details, output=output)
        self.retry_after = retry_after


class ServiceUnavailable(TemporaryError):
    """5xx or a connection failure."""


class TooManyRequests(TemporaryError):
    """429: the peer asks us to slow down (for evictions: a PodDisruptionBudget says no for now)."""


class Conflict(TemporaryError):
    """409: the object changed under us; re-read and try again."""


class PermanentError(ActionError):
    """Retrying cannot help."""


class Unauthorized(PermanentError):
    """401."""


class Forbidden(PermanentError):
    """403."""


class NotFound(PermanentError):
    """404."""


class Invalid(PermanentError):
    """422 or parameters that fail validation."""


class NotSupported(PermanentError):
    """The target cannot do this at all (501)."""


class StepFailed(PermanentError):
    """The action ran but its goal was not reached."""


_BY_STATUS: dict[int, type[ActionError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: NotFound,
    422: Invalid,
    400: Invalid,
    429: TooManyRequests,
    501: NotSupported,
}


def error_for_status(status: int, message: str, *, details: object = None) -> ActionError:
    """Map an HTTP status from any peer to the matching class of the tree."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServiceUnavailable if status >= 500 else PermanentError
    return cls(message, status=status, details=details)

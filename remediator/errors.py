"""The project's error tree, in one place so every layer raises and catches the same classes.

    RemediatorError
    ├── ConfigError                 bad settings; the process refuses to start
    │   └── ReplicaGuardError       another controller holds this database's single-replica guard
    ├── DefinitionError             a rule/playbook/catalog problem found at load time (file:line: message)
    │   └── DefinitionSetError      several DefinitionErrors found in one pass
    ├── IllegalTransition           the state machine was asked for a move its table forbids
    │   └── NothingHeld             a return asked of a remediation that holds nothing
    ├── StoreUnavailable            the database cannot be reached (the webhook answers 503)
    │   └── SpoolUnavailable        the intake spool's file was removed, replaced or damaged
    ├── LeaseLost                   this worker no longer owns the remediation
    │   └── StateMoved              a person moved it on while this worker drove it
    ├── ApprovalError               unknown, expired, reused or tampered approval token
    ├── StepSignal                  a step asks for something other than success or failure
    │   ├── ResumeLater             run the step again later
    │   │   └── GateUnknown         a validation gate reached no verdict
    │   └── CancelRemediation       end the remediation as cancelled
    ├── NotificationFailed          a receiver could not be reached or refused the message
    │   └── SlackApiError           Slack's Web API answered ok: false
    ├── ControllerApiError          the CLI's call to the controller failed
    ├── SignatureError, BodyTooLarge, SignInRequired    requests refused at the door
    ├── ConditionError, TemplateProblem, TemplateBudgetExceeded, SelectorError, MatcherError, ScenarioError
    │                               bad definitions or operator input (also ValueErrors)
    ├── StartupFailure              `serve` cannot start (one line and an exit code)
    ├── WorkerProcessFailed         the worker process did not start or stopped (also a RuntimeError)
    ├── GpuNotFound                 the node agent has no GPU with that UUID
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
this tree so the engine never sees a kubernetes, httpx or pynvml exception; each adapter does it in one
place, its `map_exceptions` (adapters/kube.py, sidecar.py, notifier.py, controller_api.py; the database's is
store/availability.py).

Defined elsewhere but under this root, where their module owns what they carry: DependencyWaiting and
RetriesSpent (remediator/retrying.py, built from its policy's words), NvmlError (sidecar/nvml.py, named from
NVML's code table), Problem (sidecar/problems.py, rendered as the agent's wire model), NodeBudgetExceeded
(definitions/yaml_budget.py, also a yaml error), and exceptions private to one module. One is not under it
on purpose: definitions/conditions.py's `_OutOfBudget` is a BaseException so CEL's own handlers cannot
swallow it (tests/test_error_vocabulary.py names it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ActionError",
    "ApprovalError",
    "BodyTooLarge",
    "CancelRemediation",
    "ConditionError",
    "ConfigError",
    "Conflict",
    "ControllerApiError",
    "DefinitionError",
    "DefinitionSetError",
    "Forbidden",
    "GateUnknown",
    "GpuNotFound",
    "IllegalTransition",
    "Invalid",
    "LeaseLost",
    "MatcherError",
    "NotFound",
    "NotSupported",
    "NothingHeld",
    "NotificationFailed",
    "PermanentError",
    "RemediatorError",
    "ReplicaGuardError",
    "ResumeLater",
    "ScenarioError",
    "SelectorError",
    "ServiceUnavailable",
    "SignInRequired",
    "SignatureError",
    "SlackApiError",
    "SpoolUnavailable",
    "StartupFailure",
    "StateMoved",
    "StepFailed",
    "StepSignal",
    "StoreUnavailable",
    "TemplateBudgetExceeded",
    "TemplateProblem",
    "TemporaryError",
    "TooManyRequests",
    "Unauthorized",
    "WorkerProcessFailed",
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



class NothingHeld(IllegalTransition):
    """A return asked of a remediation that holds nothing on its node or GPU."""

    def __init__(self, state: str, allowed: tuple[str, ...]) -> None:
        super().__init__(state, "return", allowed)
        then = f"allowed: {', '.join(allowed)}" if allowed else "nothing can be done"
        self.args = (f"remediation is {state} and holds nothing on its node or GPU, so there is nothing to return; "
                     f"{then}",)

    def __str__(self) -> str:
        return str(self.args[0])


# ---------------------------------------------------------------- what a step asks of the engine


class StepSignal(RemediatorError):
    """A step asks the executor for something other than success or failure."""


class ResumeLater(StepSignal):
    """Run this step again in `delay` seconds; the remediation keeps its place and releases its lease."""

    def __init__(self, delay: float, reason: str = "") -> None:
        self.delay = max(0.0, delay)
        self.reason = reason
        super().__init__(reason or f"resume in {self.delay:g}s")


class GateUnknown(ResumeLater):
    """A validation gate reached no verdict: the node agent at `agent` (`host:port`) was unreachable, answered
    an error or did not answer in time, or the GPU or NVML could not be read. Unknown is not failed: the
    engine keeps the node quarantined, looks again with backoff (settings.gate_unknown_backoff_s, doubling),
    pages a person once and never climbs the escalation ladder. `symptom` is short ("unreachable",
    "answering 503"), `detail` the error as read; `output` what was read before (partial reports)."""

    def __init__(
        self, agent: str, symptom: str, detail: str, *, delay: float = 15.0, output: dict[str, Any] | None = None
    ) -> None:
        self.agent = agent
        self.symptom = symptom
        self.detail = detail
        self.output = {"verdict": "unknown", "agent": agent, "unreadable": detail, **(output or {})}
        super().__init__(delay, reason=f"gate unknown: agent {agent} {symptom}")


class CancelRemediation(StepSignal):
    """End the remediation as `cancelled`; with `revert`, undo the steps that already changed something."""

    def __init__(self, reason: str, *, revert: bool = True, output: dict[str, Any] | None = None) -> None:
        self.reason = reason
        self.revert = revert
        self.output = dict(output or {})
        super().__init__(reason)


# ---------------------------------------------------------------- the store


class LeaseLost(RemediatorError):
    """This worker no longer owns the remediation; another replica took it over."""


class StateMoved(LeaseLost):
    """A person moved the remediation on (cancel, return) while this worker drove it: a forward step or an
    approval request it was about to begin no longer belongs to the state it is in. The driver stops and
    releases the lease; the next claim goes on from the new state."""


class SpoolUnavailable(StoreUnavailable):
    """The spool refuses webhooks: its file was removed, replaced or damaged (the webhook's 503 reason)."""

    reason = "intake_spool"


# ---------------------------------------------------------------- peers: notifications, the controller API


class NotificationFailed(RemediatorError):
    """A receiver could not be reached or refused the message after every retry.

    `retryable` is the classification (`transient_answer`); `outcome` says, once delivery stopped, why it
    stopped (permanent, or what ended the retries of a transient failure) and `attempts` how many calls."""

    def __init__(self, channel: str, reason: str, *, retryable: bool = True, retry_after: float | None = None) -> None:
        self.channel = channel
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after  # what the receiver asked for (Retry-After), in seconds
        self.attempts = 1
        self.outcome = ""
        super().__init__(f"{channel}: {reason}")

    def __str__(self) -> str:
        said = f"{self.channel}: {self.reason}"
        return f"{said} ({self.outcome})" if self.outcome else said


class SlackApiError(NotificationFailed):
    """Slack's Web API answered `ok: false`; `error` is Slack's code (`channel_not_found`, `ratelimited`)."""

    def __init__(
        self, channel: str, method: str, error: str, *, retryable: bool, retry_after: float | None = None
    ) -> None:
        self.method = method
        self.error = error
        super().__init__(channel, f"{method}: {error}", retryable=retryable, retry_after=retry_after)


class ControllerApiError(RemediatorError):
    """The controller said no (`status` is its HTTP status) or could not be reached (`status` is None)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# ---------------------------------------------------------------- requests refused at the controller's door


class SignatureError(RemediatorError):
    """The request is not provably from Slack; `reason` says why (safe to log, not to echo secrets)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class BodyTooLarge(RemediatorError):
    """A request body passed its limit."""


class SignInRequired(RemediatorError):
    """Raised by UI routes for a visitor who must sign in first; answered with a redirect to /login."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


# ---------------------------------------------------------------- definitions and operator input
# ValueErrors as well: pydantic validators and callers that accept any ValueError keep catching them.


class ConditionError(RemediatorError, ValueError):
    """A condition that does not compile, names unknown variables, or fails / yields a non-bool."""

    def __init__(self, message: str, line: int = 1) -> None:
        self.line = line
        super().__init__(message)


class TemplateProblem(RemediatorError, ValueError):
    """A template that cannot be parsed or names something templates cannot see."""

    def __init__(self, message: str, line: int = 1) -> None:
        self.line = line
        super().__init__(message)


class TemplateBudgetExceeded(RemediatorError, ValueError):
    """A rendering that ran out of steps, time or output size."""


class SelectorError(RemediatorError, ValueError):
    """A label selector this controller does not accept, with the reason."""


class MatcherError(RemediatorError, ValueError):
    """A matcher that is not valid; `field` names it (`matchers[1].value`) for the API's 422."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ScenarioError(RemediatorError, ValueError):
    """A storm scenario file that cannot be run: the message names the field."""


# ---------------------------------------------------------------- the process


@dataclass
class StartupFailure(RemediatorError):
    """`remediator serve` cannot start: one line for stderr and the exit code (engine/startup.py lists them)."""

    message: str
    exit_code: int

    def __str__(self) -> str:
        return self.message


class WorkerProcessFailed(RemediatorError, RuntimeError):
    """The worker process did not start, or stopped on its own."""


# ---------------------------------------------------------------- the node agent


class GpuNotFound(RemediatorError):
    """No GPU on this node has the UUID asked for."""

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

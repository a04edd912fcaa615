"""The contract between the engine and every action: parameters, context, result, registry entry.

An action is a small class generic over its pydantic parameters model (`Action[P]`, with `Params = P`),
with an async `apply` that does the work, an async `plan` that only looks and says what `apply` would do
(dry runs), and a `describe` for plans and approval pages. `run` picks `plan` or `apply` from
`ctx.dry_run`: the one place that reads it, so an action never asks itself whether it is a dry run.
It must be idempotent: running it twice leaves the cluster as running it once, because after a crash
the engine re-runs the step that was in flight. It records in `ActionResult.output` what it found before
changing anything, so its revert can restore exactly the prior state (`ctx.prior_output`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, final

from pydantic import BaseModel, ConfigDict

from remediator.domain.json_values import JsonObject, JsonValue

if TYPE_CHECKING:
    from remediator.adapters.kube import KubeAdapter
    from remediator.adapters.notifier import Notifier
    from remediator.adapters.sidecar import SidecarClient
    from remediator.settings import Settings

__all__ = [
    "Action",
    "ActionContext",
    "ActionResult",
    "AnyAction",
    "NoParams",
    "P",
    "StrictParams",
    "Target",
    "planned",
]


class StrictParams(BaseModel):
    """Base for action parameters: unknown keys are errors, values are validated after rendering."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(StrictParams):
    """For actions that take no parameters."""


P = TypeVar("P", bound=StrictParams)


@dataclass(frozen=True)
class Target:
    """What a remediation acts on, normalised from the alert."""

    kind: Literal["node", "gpu", "gpu_instance", "namespace"]
    node: str | None = None
    gpu_uuid: str | None = None
    gpu_index: str | None = None
    namespace: str | None = None
    pod: str | None = None
    # The MIG GPU instance of a `gpu_instance` target (the alert's `gpu_instance` label); None otherwise.
    gpu_instance: int | None = None

    def __post_init__(self) -> None:
        if (self.kind == "gpu_instance") != (self.gpu_instance is not None):
            raise ValueError(
                f"a {self.kind} target {'needs' if self.kind == 'gpu_instance' else 'takes no'} GPU instance id "
                f"(gpu_instance={self.gpu_instance!r})"
            )

    @property
    def key(self) -> str:
        """Stable identity used for 'one active remediation per (target, playbook)' and cooldowns. A
        `gpu_instance` target is one GPU instance of one GPU: two instances of a GPU are two targets."""
        if self.kind == "gpu":
            return f"gpu:{self.node or '?'}/{self.gpu_uuid or self.gpu_index or '?'}"
        if self.kind == "gpu_instance":
            return f"gpu_instance:{self.node or '?'}/{self.gpu_uuid or self.gpu_index or '?'}/gi{self.gpu_instance}"
        if self.kind == "namespace":
            return f"namespace:{self.namespace or '?'}"
        return f"node:{self.node or '?'}"

    @property
    def on_gpu(self) -> bool:
        """Does the target name a GPU (a whole GPU or one of its MIG GPU instances)?"""
        return self.kind in ("gpu", "gpu_instance")


async def _no_checkpoint(progress: JsonObject) -> None:
    return None


async def _never_resolved() -> bool:
    return False


@dataclass
class ActionContext:
    """Everything an action may use for one step run (`ctx`). Adapters are None when not configured
    (plan-only mode: no kube).

    Three things were once all called "context": this object (the step's environment); `gathered`, the
    cluster facts read once before admission (node, pods, owners; stored as the remediation's `context`
    column); and the `context` name templates and conditions see, which is `gathered` again, kept under that
    name for playbooks (remediator/definitions/variables.py).
    """

    remediation_id: str
    step_name: str
    target: Target
    settings: Settings
    # Change nothing: `Action.run` calls the action's `plan` instead of its `apply`.
    dry_run: bool
    kube: KubeAdapter | None = None
    sidecar: SidecarClient | None = None
    notifier: Notifier | None = None
    timeout: float = 300.0
    # For a revert step: the output of the forward step it undoes.
    prior_output: Mapping[str, JsonValue] | None = None
    # Partial progress saved by an earlier attempt (e.g. pods already evicted); persisted by `checkpoint`.
    progress: JsonObject = field(default_factory=dict)
    checkpoint: Callable[[JsonObject], Awaitable[None]] = _no_checkpoint
    # The alert as stored (name, fingerprint, labels, annotations), read-only; its startsAt (ISO 8601).
    alert: Mapping[str, object] = field(default_factory=dict)
    alert_starts_at: str = ""
    # The cluster facts gathered before admission (node, pods, owners), read-only.
    gathered: Mapping[str, object] = field(default_factory=dict)
    # True once the remediation's alert has resolved (used by `wait`).
    alert_resolved: Callable[[], Awaitable[bool]] = _never_resolved
    # What `Action.observe` read just before the step began (e.g. the node), for `apply` to build its first
    # write on instead of reading it again; None when observe did not run or read nothing worth keeping.
    observed: JsonObject | None = None
    # The target node's object as the remediation's context read it a moment before (a first step prepared
    # with its admission: engine/step_lifecycle.py); `observe` takes it instead of reading the node again.
    node_read: JsonObject | None = None


@dataclass
class ActionResult:
    """What a step did. `output` is stored, shown in the API, passed to later steps and to the revert."""

    changed: bool
    message: str = ""
    output: JsonObject = field(default_factory=dict)


class Action(ABC, Generic[P]):
    """One verb over parameters of type `P`. Subclasses set `name`, `Params` (the class `P`), the flags below,
    and `apply`; those whose dry run must look at the cluster or ask the sidecar override `plan`."""

    name: ClassVar[str]
    # The parameters model; `parse` validates a step's rendered parameters into it once, before any run.
    Params: type[P]
    # Changes the cluster or a GPU (pause stops a remediation before its next mutating step).
    mutating: ClassVar[bool] = True
    # Puts a node under quarantine (counts toward MAX_QUARANTINED_NODES).
    quarantines: ClassVar[bool] = False
    # Name of the action that undoes this one when the playbook step gives no explicit `revert`.
    default_revert: ClassVar[str | None] = None
    # A validation gate: when a step of this action fails, the GPU did not prove healthy and the
    # remediation escalates to the next rung of the escalation ladder.
    gate: ClassVar[bool] = False

    def parse(self, raw: Mapping[str, object]) -> P:
        """Validate rendered parameters (raises pydantic.ValidationError)."""
        return self.Params.model_validate(dict(raw))

    @final
    async def run(self, ctx: ActionContext, params: P) -> ActionResult:
        """`plan` in a dry run, else `apply`. Raise remediator.errors.ActionError on failure."""
        if ctx.dry_run:
            return await self.plan(ctx, params)
        return await self.apply(ctx, params)

    @abstractmethod
    async def apply(self, ctx: ActionContext, params: P) -> ActionResult:
        """Do the work. Raise remediator.errors.ActionError on failure."""

    async def observe(self, ctx: ActionContext, params: P) -> JsonObject | None:
        """The progress `apply` would checkpoint before its first write (what was there before), read before
        the step is begun so that a new step row is stored with it: one transaction where begin, then a
        checkpoint, were two. Read-only; never called in a dry run. `apply` must still work without it (it is
        skipped when it fails, and a resumed step keeps the progress it saved): it finds the observation in
        `ctx.progress` and does not checkpoint it again. It may leave what it read in `ctx.observed` for
        `apply`, which must then guard its write against changes since (a resourceVersion precondition).
        None (the default): nothing to observe."""
        return None

    async def plan(self, ctx: ActionContext, params: P) -> ActionResult:
        """Say what `apply` would do, changing nothing. This default says it from the parameters alone;
        an action whose answer depends on what is there now (the node, the GPU) looks first."""
        return planned("would " + self.describe(ctx.target, params))

    def still_holds(self, node: Mapping[str, object], params: Mapping[str, object], remediation_id: str) -> bool:
        """For a quarantining action: does `node` still carry what this step (its stored, rendered `params`)
        put there for `remediation_id`? The engine asks this instead of knowing each action's marks."""
        return False

    def describe(self, target: Target, params: P) -> str:
        """One line for plans and approval pages: what this step will do."""
        shown = ", ".join(f"{k}={v}" for k, v in params.model_dump(exclude_none=True).items())
        return f"{self.name}({shown}) on {target.key}"


# An action whose parameters type is not known here (the registry's values, the engine's step runner).
AnyAction = Action[Any]


def planned(message: str, output: Mapping[str, JsonValue] | None = None) -> ActionResult:
    """The result of a `plan`: nothing changed, `dry run: <message>`, the output marked `dry_run`."""
    return ActionResult(changed=False, message=f"dry run: {message}", output={**(output or {}), "dry_run": True})

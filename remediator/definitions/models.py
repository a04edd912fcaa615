"""The typed form of rules and playbooks: what the engine reads after the loader has checked the YAML.

Playbooks are snapshotted into each remediation (`model_dump(mode="json")`) and read back with
`Playbook.model_validate`, so every field round-trips through JSON; durations are written as `5m`.
Checks that need a file location or another file (unknown actions, templates, CEL, duplicate step names,
missing playbooks) live in the loader, which has the line numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    PlainSerializer,
    Tag,
    field_validator,
)
from pydantic_core import PydanticSerializationError, to_jsonable_python

from remediator.definitions.matchers import Matcher, parse_matcher
from remediator.domain.durations import format_duration, parse_duration
from remediator.intake.normalize import AlertKind

__all__ = [
    "Duration",
    "Playbook",
    "RevertSpec",
    "Rule",
    "Step",
]


def _duration(value: object) -> object:
    if isinstance(value, str) and value.startswith(("P", "-P")):
        return value  # ISO 8601, as pydantic writes timedelta; pydantic parses it
    return parse_duration(value)


Duration = Annotated[
    timedelta,
    BeforeValidator(_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]


def _revert_kind(value: object) -> str:
    return "spec" if isinstance(value, Mapping | RevertSpec) else "off"


def _json_params(value: object) -> object:
    """None as no parameters; YAML dates and timestamps as the ISO strings a playbook snapshot stores."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return value  # pydantic names the error
    try:
        return {k: to_jsonable_python(v) for k, v in value.items()}
    except PydanticSerializationError:
        return value  # pydantic names the value that is not JSON


# Step, playbook and rule parameters: plain JSON values (template strings, numbers, lists, mappings).
Params = Annotated[dict[str, JsonValue], BeforeValidator(_json_params)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RevertSpec(_Strict):
    """An explicit undo for a step: which action, with which (template) parameters."""

    action: str = Field(min_length=1)
    params: Params = Field(default_factory=dict)


class Step(_Strict):
    """One playbook step. `params` values may be Jinja2 templates; `when` is a CEL expression."""

    name: str = Field(min_length=1)
    action: str = Field(min_length=1)
    params: Params = Field(default_factory=dict)
    when: str | None = None
    timeout: Duration = timedelta(minutes=5)
    retries: int = Field(default=3, ge=0, le=100)
    on_failure: Literal["abort", "continue"] = "abort"
    # False: never undone. RevertSpec: undone by that action. None: the action's own default revert.
    revert: Annotated[
        Annotated[RevertSpec, Tag("spec")] | Annotated[Literal[False] | None, Tag("off")],
        Discriminator(_revert_kind),
    ] = None
    approval: Literal["required"] | None = None

    @field_validator("when", mode="before")
    @classmethod
    def _blank_when(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        return value


class Playbook(_Strict):
    """An ordered list of steps run against one target (a node, a GPU, a MIG GPU instance or a namespace)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    target: Literal["node", "gpu", "gpu_instance", "namespace"] = "node"
    params: Params = Field(default_factory=dict)
    steps: tuple[Step, ...] = Field(min_length=1)
    on_resolved: Literal["revert", "keep"] = "keep"
    on_expiry: Literal["abort", "continue"] = "abort"
    # Proof before return to service: checks run, in order, whenever the remediation is reverted (the alert
    # resolved, a cancel, an operator's revert), before anything is undone. A gate step may wait (e.g.
    # `await_reboot`); one that fails ends the undo with nothing undone, so the quarantine stays.
    return_gate: tuple[Step, ...] = ()

    @field_validator("return_gate", mode="before")
    @classmethod
    def _null_gate(cls, value: object) -> object:
        return () if value is None else value

    @field_validator("return_gate")
    @classmethod
    def _gate_steps(cls, value: tuple[Step, ...]) -> tuple[Step, ...]:
        for step in value:
            if step.revert is not None:
                raise ValueError(f"return_gate step {step.name!r}: a gate step is never undone; drop its revert")
            if step.approval is not None:
                raise ValueError(f"return_gate step {step.name!r}: a gate step cannot wait for an approval")
        return value

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)


def _matchers(value: object) -> object:
    """The mapping form `{label: value}` means equality; the list form holds matcher strings."""
    if isinstance(value, Mapping):
        return [Matcher(name=str(k), op="=", value="" if v is None else str(v)) for k, v in value.items()]
    if isinstance(value, str):
        return [value]
    return value


ParsedMatcher = Annotated[Matcher, BeforeValidator(parse_matcher)]


class Rule(_Strict):
    """Which alerts (Alertmanager matchers) start which playbook, with which parameters."""

    name: str = Field(min_length=1)
    match: Annotated[tuple[ParsedMatcher, ...], BeforeValidator(_matchers)] = Field(min_length=1)
    playbook: str = Field(min_length=1)
    params: Params = Field(default_factory=dict)
    priority: int = 0
    cooldown: Duration | None = None
    enabled: bool = True
    kind: AlertKind | None = None
    require_approval: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Every matcher holds (Alertmanager semantics)."""
        return all(m.matches(labels) for m in self.match)

    def equality_alertnames(self) -> list[str]:
        """Alert names this rule selects with `alertname="..."` (used to learn alert kinds)."""
        return [m.value for m in self.match if m.name == "alertname" and m.op == "="]

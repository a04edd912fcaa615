"""The plan a remediation runs from, typed: written once when the remediation is created, read back by all.

`Remediation.plan` is a JSON column holding the snapshot of what the remediation was decided from: its
playbook, the alert, the Xid facts, whether a person must approve, the rule's cooldown, the definition
versions, and (for a rung of the escalation ladder) the escalation. `RemediationPlan` names those keys once;
`remediation_plan` (engine/ladder.py) writes it with `plan_json`, every reader goes through `plan_of`.

The stored JSON keeps the shape it always had, so existing rows and the API's output do not change. Reading
never fails on a stored row: a key an earlier version did not write, or one that does not parse, reads as its
default (a playbook that does not parse reads as None; the executor then fails that remediation as before).

Hot readers (the decision path reads the plans of a node's history for every alert of a storm) take the one
field they need with `stored_alert_field`, `stored_playbook_field` or `stored_xid_code` instead of parsing a
whole plan per row; so do the readers of a playbook's `on_expiry` / `on_resolved`, which stay readable from a
playbook snapshot that no longer parses whole.

Pure: pydantic and the definition and alert models only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from remediator.definitions.models import Playbook
from remediator.domain.json_values import JsonObject
from remediator.intake.normalize import ALERT_FIELDS, GpuAlert

__all__ = [
    "Escalation",
    "HasPlan",
    "RemediationPlan",
    "XidFacts",
    "plan_json",
    "plan_of",
    "playbook_of",
    "read_plan",
    "stored_alert_field",
    "stored_playbook_field",
    "stored_xid_code",
]


class HasPlan(Protocol):
    """A remediation row, or anything else that carries a stored plan."""

    @property
    def plan(self) -> object: ...


class XidFacts(BaseModel):
    """What the Xid catalogue says of the alert's Xid (all None when the alert names none)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    code: int | str | None = None
    resolution: str | None = None
    cause: str | None = None
    description: str | None = None
    recovery_action: str | None = None


class Escalation(BaseModel):
    """Where a rung of the escalation ladder came from (engine/ladder.py, engine/decision.py)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    from_: str | None = Field(default=None, alias="from")
    reason: str | None = None
    rung: int | None = None
    ladder: list[str] = Field(default_factory=list)
    recurrence_seconds: float | None = None
    history: list[dict[str, JsonValue]] = Field(default_factory=list)
    gate: dict[str, JsonValue] | None = None
    # Set by a failed gate only: the gate's own words.
    why: str | None = None

    def as_json(self) -> JsonObject:
        """The keys as written (only those that were set, by their stored names)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class RemediationPlan(BaseModel):
    """The snapshot a remediation runs from."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    playbook: Playbook | None = None
    alert: GpuAlert
    xid: XidFacts = Field(default_factory=XidFacts)
    require_approval: bool = False
    # The rule's cooldown, so "why did nothing happen?" can say when a suppressed alert would act again.
    cooldown_seconds: float | None = None
    # Definition versions (engine/versions.py); None for a plan stored before they were recorded.
    versions: dict[str, str | None] | None = None
    escalation: Escalation | None = None

    @property
    def xid_json(self) -> JsonObject:
        """The Xid facts as stored (the `xid` variable of templates)."""
        return self.xid.model_dump(mode="json", exclude_unset=True)

    @property
    def escalation_json(self) -> JsonObject | None:
        return self.escalation.as_json() if self.escalation is not None else None


def plan_json(plan: RemediationPlan, playbook_json: JsonObject) -> JsonObject:
    """The JSON stored for `plan`; `playbook_json` is its playbook dumped (callers cache that dump)."""
    stored: JsonObject = {
        "playbook": playbook_json,
        "alert": plan.alert.as_json(),
        "xid": plan.xid_json,
        "require_approval": plan.require_approval,
        "cooldown_seconds": plan.cooldown_seconds,
        "versions": {**(plan.versions or {})},
    }
    if plan.escalation is not None:
        stored["escalation"] = plan.escalation.as_json()
    return stored


def plan_of(rem: HasPlan) -> RemediationPlan:
    """The typed plan of a stored remediation (never fails: see the module's docstring)."""
    return read_plan(rem.plan)


def playbook_of(rem: HasPlan) -> Playbook:
    """The playbook a remediation runs (its plan's snapshot); an error when the stored one does not parse."""
    playbook = plan_of(rem).playbook
    if playbook is None:
        raise ValueError(f"remediation {getattr(rem, 'id', '?')}: its plan holds no playbook that parses")
    return playbook


def read_plan(raw: object) -> RemediationPlan:
    data: Mapping[str, object] = raw if isinstance(raw, Mapping) else {}
    cooldown = data.get("cooldown_seconds")
    versions = data.get("versions")
    return RemediationPlan(
        playbook=_parsed(Playbook, data.get("playbook")),
        alert=_alert(data.get("alert")),
        xid=_parsed(XidFacts, data.get("xid")) or XidFacts(),
        require_approval=bool(data.get("require_approval")),
        cooldown_seconds=float(cooldown) if isinstance(cooldown, int | float) and not isinstance(cooldown, bool)
        else None,
        versions=dict(versions) if isinstance(versions, Mapping) and versions else None,
        escalation=_parsed(Escalation, data.get("escalation")),
    )


def stored_alert_field(raw: object, name: str) -> Any:
    """One field (a `GpuAlert` field name) of the alert in a stored plan, without parsing the rest."""
    if name not in _ALERT_FIELDS:
        raise ValueError(f"GpuAlert has no field {name!r}")
    return _section(raw, "alert").get(name)


def stored_playbook_field(raw: object, name: str) -> Any:
    """One field (a `Playbook` field name) of the playbook in a stored plan, without parsing the rest: also
    read from a playbook snapshot that no longer parses whole."""
    if name not in Playbook.model_fields:
        raise ValueError(f"Playbook has no field {name!r}")
    return _section(raw, "playbook").get(name)


def stored_xid_code(raw: object) -> Any:
    """The Xid code in a stored plan, without parsing the rest."""
    return _section(raw, "xid").get("code")


# -- tolerant parsing ---------------------------------------------------------------------------------------

_ALERT_FIELDS = frozenset(ALERT_FIELDS)
_ALERT_REQUIRED: dict[str, str | None] = {
    "alertname": "", "status": "", "fingerprint": "", "kind": "", "node": None, "node_source": None,
}


def _section(raw: object, key: str) -> Mapping[str, object]:
    value = raw.get(key) if isinstance(raw, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _alert(raw: object) -> GpuAlert:
    data = raw if isinstance(raw, Mapping) else {}
    return GpuAlert(**{**_ALERT_REQUIRED, **{k: v for k, v in data.items() if k in _ALERT_FIELDS}})


_M = TypeVar("_M", bound=BaseModel)


def _parsed(model: type[_M], raw: object) -> _M | None:
    if not isinstance(raw, Mapping):
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None

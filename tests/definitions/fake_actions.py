"""Parameter models shaped like the node actions, so definition tests need no action code."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from remediator.domain.durations import parse_duration


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(_Params):
    pass


class TaintParams(_Params):
    key: str = "remediator.io/gpu-unhealthy"
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class UntaintParams(_Params):
    key: str = "remediator.io/gpu-unhealthy"
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class LabelParams(_Params):
    key: str
    value: str


class UnlabelParams(_Params):
    key: str


class EventParams(_Params):
    reason: str
    message: str
    type: Literal["Normal", "Warning"] = "Warning"
    object: Literal["node", "pods"] = "node"

    deprecated_keys: ClassVar[dict[str, tuple[str, str]]] = {"on": ("object", "YAML 1.1 reads `on` as true")}

    @model_validator(mode="before")
    @classmethod
    def _old_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "on" in data:
            data = dict(data)
            data.setdefault("object", data.pop("on"))
        return data


class DrainParams(_Params):
    pods: str = "gpu"
    grace_period: int = Field(default=300, ge=0)
    timeout: timedelta = timedelta(minutes=30)
    skip_namespaces: list[str] = Field(default_factory=list)

    @field_validator("pods")
    @classmethod
    def _pods(cls, value: str) -> str:
        if not re.fullmatch(r"all|gpu|gpu:.+", value):
            raise ValueError("pods must be all, gpu or gpu:<uuid>")
        return value

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, value: object) -> timedelta:
        return parse_duration(value)  # type: ignore[arg-type]


KNOWN_ACTIONS: dict[str, type[BaseModel]] = {
    "cordon": NoParams,
    "uncordon": NoParams,
    "taint": TaintParams,
    "untaint": UntaintParams,
    "label": LabelParams,
    "unlabel": UnlabelParams,
    "annotate": LabelParams,
    "event": EventParams,
    "drain": DrainParams,
}

"""Alertmanager webhook (version "4") payload, validated strictly so a malformed body names its field.

Alertmanager sends `endsAt: 0001-01-01T00:00:00Z` for firing alerts; that is read as "no end" (None).
The fingerprint depends on labels only, so firing and resolved deliveries share it.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["AlertmanagerAlert", "AlertmanagerPayload"]

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_MAX_LABELS = 128
_MAX_VALUE = 16 * 1024

Labels = Annotated[dict[str, str], Field(max_length=_MAX_LABELS)]


def _check_labels(value: dict[str, str]) -> dict[str, str]:
    for name, text in value.items():
        if not _LABEL_NAME.match(name):
            raise ValueError(f"label name {name!r} is not a valid Prometheus label name")
        if len(text) > _MAX_VALUE:
            raise ValueError(f"label {name!r} is longer than {_MAX_VALUE} characters")
    return value


class AlertmanagerAlert(BaseModel):
    """One alert in a notification."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    starts_at: datetime = Field(alias="startsAt")
    ends_at: datetime | None = Field(default=None, alias="endsAt")
    generator_url: str = Field(default="", alias="generatorURL", max_length=8192)
    fingerprint: str = Field(min_length=1, max_length=64, pattern=r"^[0-9a-zA-Z]+$")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        _check_labels(value)
        if "alertname" not in value or not value["alertname"]:
            raise ValueError("alertname label is required")
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if len(text) > _MAX_VALUE:
                raise ValueError(f"annotation {name!r} is longer than {_MAX_VALUE} characters")
        return value

    @field_validator("ends_at")
    @classmethod
    def _zero_time(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.year <= 1:
            return None
        return value

    @property
    def alertname(self) -> str:
        return self.labels["alertname"]


class AlertmanagerPayload(BaseModel):
    """The whole webhook body."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    version: Literal["4"]
    group_key: str = Field(alias="groupKey", max_length=16384)
    truncated_alerts: int = Field(default=0, alias="truncatedAlerts", ge=0)
    status: Literal["firing", "resolved"]
    receiver: str = Field(max_length=1024)
    group_labels: dict[str, str] = Field(default_factory=dict, alias="groupLabels")
    common_labels: dict[str, str] = Field(default_factory=dict, alias="commonLabels")
    common_annotations: dict[str, str] = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str = Field(default="", alias="externalURL", max_length=8192)
    alerts: list[AlertmanagerAlert] = Field(min_length=1, max_length=10000)

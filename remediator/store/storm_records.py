"""A stored storm as the store hands it out: the record the API, the audit log, the UI, Slack and the CLI show.

The storm row (store/models.py: Storm) is read in one place (store/storm_store.py: storm_record); everyone
else reads these keys, so a misspelt one is a type error instead of a silent None.
"""

from __future__ import annotations

from typing import TypedDict

from remediator.domain.json_values import JsonObject

__all__ = ["HeldRemediation", "StormCause", "StormRecord", "StormSlack"]


class StormCause(TypedDict):
    """The attribute the faulting nodes share (`key`=`value`) and how people are told of it."""

    key: str
    value: str
    text: str


class StormSlack(TypedDict):
    """Where the storm's Slack message is."""

    channel: str | None
    ts: str | None


class StormRecord(TypedDict):
    """One storm; times as ISO 8601 text."""

    id: str
    state: str
    opened_at: str | None
    updated_at: str | None
    cause: StormCause
    nodes: list[str]
    analysis: JsonObject  # domain/storms.py's analysis as last computed (candidates with their counts)
    timeline: list[JsonObject]
    decided_at: str | None
    decided_by: str | None
    decision_reason: str | None
    slack: StormSlack | None


class HeldRemediation(TypedDict):
    """A remediation a storm holds now."""

    id: str
    node: str | None
    playbook: str
    created_at: str | None

"""Plain JSON-like data from whatever a caller holds: what the store persists and the offline tools compare.

One function, so a stored plan, a replayed plan and a printed plan are cleaned the same way: mappings with
string keys, tuples as lists, scalars as they are, anything else as its string. The types name such data where
it is only carried (stored, sent, compared); code that reads a Kubernetes object reads it through a view
(remediator/kube/views.py), not through these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

__all__ = ["JsonObject", "JsonScalar", "JsonValue", "jsonable"]

JsonScalar: TypeAlias = str | int | float | bool | None
JsonValue: TypeAlias = "JsonScalar | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = dict[str, JsonValue]


def jsonable(value: Any) -> Any:
    """Plain JSON-like data (tuples as lists, unknown objects as strings).

    Exact types are tried first: every new remediation's plan (a playbook dump of a few KB) passes through
    here, and the isinstance checks against the Mapping ABC made it ~4x slower than it needs to be
    (bench/fleet_storm.py profile: 6.6% of a replica's CPU)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): jsonable(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bool | int | float | str):  # subclasses (enums) as they are
        return value
    return str(value)

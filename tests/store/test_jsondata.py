"""`jsonable`: what the store persists for plans, params and contexts is plain JSON-like data."""

from __future__ import annotations

import enum
import json
from collections import OrderedDict
from datetime import UTC, datetime
from types import MappingProxyType

from remediator.domain.json_values import jsonable


class Color(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def test_plain_data_comes_back_equal_but_never_shared() -> None:
    plan = {"playbook": {"steps": [{"name": "taint", "params": {"effect": "NoSchedule"}}]}, "n": 1, "ok": True,
            "ratio": 0.5, "none": None}
    copied = jsonable(plan)
    assert copied == plan
    copied["playbook"]["steps"][0]["name"] = "changed"
    assert plan["playbook"]["steps"][0]["name"] == "taint"


def test_tuples_become_lists_and_keys_strings() -> None:
    assert jsonable({1: (1, 2), ("a", "b"): [(3,)]}) == {"1": [1, 2], "('a', 'b')": [[3]]}


def test_mapping_types_and_subclasses_become_dicts() -> None:
    value = {"a": OrderedDict(x=1), "b": MappingProxyType({"y": (2,)})}
    assert jsonable(value) == {"a": {"x": 1}, "b": {"y": [2]}}
    assert type(jsonable(value)["b"]) is dict


def test_enums_keep_their_values_and_unknown_objects_become_strings() -> None:
    at = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)
    out = jsonable({"color": Color.RED, "level": Level.HIGH, "at": at, Color.RED: 1})
    assert out == {"color": "red", "level": 3, "at": str(at), "red": 1}
    assert json.loads(json.dumps(out)) == out

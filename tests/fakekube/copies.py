"""Deep copies of stored objects, made fast enough for a fleet-size fake.

The fake hands out copies (a caller mutating what it got must not change what is stored, as over HTTP) and
stores copies of what it is given. `copy.deepcopy` of a realistic 19 KB Node took ~216 us; a PATCH made five
of them, and in bench/fleet_storm.py the fake's copies were ~29% of the benchmark process's CPU, taken from
the controllers it measures on the same cores. A pickle round trip copies the same JSON-shaped documents in
~49 us, keeping shared sub-objects shared exactly as `deepcopy` does.
"""

from __future__ import annotations

import copy
import pickle
from typing import TypeVar

__all__ = ["deep_copy"]

T = TypeVar("T")


def deep_copy(value: T) -> T:
    """An independent copy of `value` (JSON-shaped documents; anything else falls back to deepcopy)."""
    try:
        copied: T = pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
    except (pickle.PicklingError, TypeError, AttributeError):
        return copy.deepcopy(value)
    return copied

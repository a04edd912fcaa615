"""Plain JSON-like data from whatever a caller holds: what the store persists and the offline tools compare.

One function, so a stored plan, a replayed plan and a printed plan are cleaned the same way: mappings with
string keys, tuples as lists, scalars as they are, anything else as its string.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["jsonable"]


def jsonable(value: Any) -> Any:
    """Plain JSON-like data (tuples as lists, unknown objects as strings)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)

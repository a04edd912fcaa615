"""Parse and print durations the way SREs write them in YAML and settings: `90s`, `30m`, `2h`, `1h30m`, `7d`.

`Duration` is the pydantic type of a duration parameter: checked once when the parameters are parsed, and
kept as written (`"2h"` stays `"2h"` in plans, approval pages and stored parameters); `parse_duration` turns
it into a timedelta where it is used.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import AfterValidator

__all__ = ["Duration", "format_duration", "parse_duration"]

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """`'1h30m'` -> timedelta(hours=1, minutes=30); bare numbers are seconds. Raises ValueError."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"negative duration: {value!r}")
        return timedelta(seconds=float(value))
    text = str(value).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return timedelta(seconds=float(text))
    pos = 0
    total = 0.0
    for m in _PART.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {value!r} (use e.g. 90s, 30m, 2h, 1h30m, 7d)")
    return timedelta(seconds=total)


def _checked(value: str) -> str:
    parse_duration(value)
    return value


# A duration parameter as written (`90s`, `30m`, `2h`, `1h30m`): a ValueError naming the forms otherwise.
Duration = Annotated[str, AfterValidator(_checked)]


def format_duration(value: timedelta) -> str:
    """timedelta -> compact text such as `1h30m` (sub-second values as milliseconds)."""
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    out = []
    rest = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(out) or "0s"

"""Parse and print durations the way SREs write them in YAML and settings: `90s`, `30m`, `2h`, `1h30m`, `7d`.

`DurationText` (text) and `DurationOrSeconds` (text or a number of seconds) are the pydantic types of a duration
parameter: checked once when the parameters are parsed, and kept as written (`"2h"` stays `"2h"` in plans,
approval pages and stored parameters); `within` adds bounds; `parse_duration` turns the value into a
timedelta where it is used.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, TypeVar

from pydantic import AfterValidator

__all__ = ["DurationOrSeconds", "DurationText", "format_duration", "parse_duration", "within"]

T = TypeVar("T", bound=str | float)

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(value: object) -> timedelta:
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


def _checked(value: T) -> T:
    parse_duration(value)
    return value


# A duration parameter as written (`90s`, `30m`, `2h`, `1h30m`): a ValueError naming the forms otherwise.
DurationText = Annotated[str, AfterValidator(_checked)]
# The same, or a bare number of seconds.
DurationOrSeconds = Annotated[str | float, AfterValidator(_checked)]


def within(low: float, high: float) -> AfterValidator:
    """Bounds in seconds for a duration parameter: more than 0 when `low` is 0, else at least `low`; at most
    `high`. Goes after the type: `Annotated[DurationOrSeconds, within(1, 3600)]`."""

    def bounded(value: T) -> T:
        seconds = parse_duration(value).total_seconds()
        top = format_duration(timedelta(seconds=high))
        if low == 0 and not 0 < seconds <= high:
            raise ValueError(f"must be more than 0 and at most {top}")
        if low > 0 and not low <= seconds <= high:
            raise ValueError(f"must be between {format_duration(timedelta(seconds=low))} and {top}")
        return value

    return AfterValidator(bounded)


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

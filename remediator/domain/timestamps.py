"""One clock and one timestamp: every time the controller handles is an aware UTC datetime.

`Clock` is the injected time source (the store's unit of work holds one, `Runtime.clock` hands it out; tests
give a fixed or stepped one). `utc_now` is the real one. `as_utc` is the one place where a datetime from outside
(a person's input, a parsed string, a value some library returned naive) becomes aware UTC: naive means UTC.
What the store reads back is already aware UTC (store/columns.py), so nothing else converts.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "as_utc", "utc_now"]

Clock = Callable[[], datetime]
"""A time source: returns the current time as an aware UTC datetime."""


def utc_now() -> datetime:
    """The current time, aware UTC (the default `Clock`)."""
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """`value` as an aware UTC datetime; a naive value is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)

"""Column types of the store's own: `UtcDateTime`, the one timestamp column type, so that every datetime read
back is aware UTC on SQLite (which stores none of the zone and hands back naive values) and PostgreSQL alike.

A Python-side type over `DateTime(timezone=True)`: the schema (the Alembic migrations) is unchanged.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from remediator.domain.timestamps import as_utc

__all__ = ["UtcDateTime"]


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp written as UTC (a naive value is taken to be UTC) and read back as aware UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        # SQLite's DATETIME keeps the wall time and drops the zone: converting first stores UTC's wall time.
        return as_utc(value) if isinstance(value, datetime) else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return as_utc(value) if isinstance(value, datetime) else value

"""Every datetime the store reads back is aware UTC (store/columns.py `UtcDateTime`), on SQLite too, which keeps
no zone; a value written in another zone, or naive (taken as UTC), reads back as the same instant in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from sqlalchemy import DateTime, select

from remediator.domain.timestamps import as_utc
from remediator.store.columns import UtcDateTime
from remediator.store.models import Base, ControllerState
from remediator.store.repository import Repository
from tests.store.test_approval_decisions import store, store_url  # noqa: F401  (fixtures)

CEST = timezone(timedelta(hours=2))


async def test_datetimes_read_back_aware_utc(store: Repository) -> None:  # noqa: F811
    written = datetime(2026, 12, 5, 16, 30, 15, 123456, tzinfo=CEST)
    naive = datetime(2026, 12, 5, 14, 0)
    async with store.transaction() as session:
        session.add(ControllerState(key="k", value={"v": 1}, updated_at=written))
        session.add(ControllerState(key="n", value={"v": 2}, updated_at=naive))
    async with store.reading() as session:
        rows = {row.key: row.updated_at for row in (await session.scalars(select(ControllerState))).all()}
        # A comparison with an aware bound finds the row: what was stored is UTC's wall time.
        found = await session.scalar(select(ControllerState.key).where(
            ControllerState.updated_at == datetime(2026, 12, 5, 14, 30, 15, 123456, tzinfo=UTC)))
    assert rows["k"].tzinfo is not None and rows["k"].utcoffset() == timedelta(0)
    assert rows["k"] == written and rows["k"] == datetime(2026, 12, 5, 14, 30, 15, 123456, tzinfo=UTC)
    assert rows["n"] == datetime(2026, 12, 5, 14, 0, tzinfo=UTC)
    assert found == "k"


def test_as_utc_takes_naive_as_utc_and_converts_other_zones() -> None:
    assert as_utc(datetime(2026, 1, 1, 12)) == datetime(2026, 1, 1, 12, tzinfo=UTC)
    converted = as_utc(datetime(2026, 1, 1, 12, tzinfo=CEST))
    assert converted.tzinfo is UTC and converted.hour == 10


def test_every_timestamp_column_is_utc() -> None:
    columns = [c for table in Base.metadata.tables.values() for c in table.columns
               if isinstance(c.type, (DateTime, UtcDateTime))]
    assert len(columns) > 10 and all(isinstance(c.type, UtcDateTime) for c in columns)

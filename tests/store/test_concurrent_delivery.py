"""A delivery that races another one of the same alert is stored as a repeat, never refused.

The race is made deterministic: on SQLite the second delivery's dedup lookup is made to miss (as it does
when it ran before the first delivery committed); on PostgreSQL the first delivery is an open transaction
that commits while the second one waits on the unique index.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, cast

import asyncpg
import pytest
from sqlalchemy import Table, insert, select

from remediator.store.db import make_engine
from remediator.store.models import AlertBatch, AlertRow
from remediator.store.repository import Repository
from remediator.store.transactions import _intake_rows
from tests.store.test_intake_store import payload
from tests.store.test_postgres import pg_repo  # noqa: F401  (fixture)


async def _rows(repo: Repository) -> list[AlertRow]:
    return sorted(await repo.list_alerts(), key=lambda a: a.id)


async def _batch_repeats(repo: Repository) -> dict[str, int]:
    async with repo.transaction() as session:
        rows = (await session.execute(select(AlertBatch.id, AlertBatch.repeat_count))).all()
    return {str(i): int(c) for i, c in rows}


def _assert_one_first_and_one_repeat(rows: list[AlertRow]) -> None:
    assert [a.state for a in rows] == ["new", "repeat"]
    assert rows[1].repeat_of == rows[0].id
    assert rows[1].dedup_key is None


async def test_sqlite_a_delivery_that_lost_the_race_is_a_repeat(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await repo.store_batch(payload(fingerprint="race1"))
    intake = repo._sqlite_intake
    assert intake is not None
    lookup = intake._begin_and_lookup

    def stale_lookup(keys: Any) -> dict[str, int]:
        lookup(keys)  # begins the transaction, but "sees" nothing, as a lookup made before the other commit
        return {}

    monkeypatch.setattr(intake, "_begin_and_lookup", stale_lookup)
    second = await repo.store_batch(payload(fingerprint="race1"))
    assert (first.repeats, second.repeats) == (0, 1)
    _assert_one_first_and_one_repeat(await _rows(repo))
    assert (await _batch_repeats(repo))[second.batch_id] == 1


async def _wait_for_lock_waiter(url: str) -> None:
    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        async with asyncio.timeout(20):
            while not await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ):
                await asyncio.sleep(0.02)
    finally:
        await conn.close()


async def test_postgres_a_delivery_racing_an_uncommitted_one_is_a_repeat(pg_repo: Repository, pg_url: str) -> None:  # noqa: F811
    racer = payload(fingerprint="race2")
    alert = racer.alerts[0]
    key = f"{alert.fingerprint}|{alert.starts_at.isoformat()}|{alert.status}"
    batch_rows, alert_rows, _ = _intake_rows([racer], [[key]], {}, datetime.now(UTC))
    other = make_engine(pg_url)
    try:
        async with other.connect() as conn:
            tx = await conn.begin()  # the other replica's delivery, stored but not yet committed
            await conn.execute(insert(cast(Table, AlertBatch.__table__)), batch_rows)
            await conn.execute(insert(cast(Table, AlertRow.__table__)), alert_rows)
            second = asyncio.create_task(pg_repo.store_batch(racer))
            await _wait_for_lock_waiter(pg_url)  # this delivery found nothing and waits on the unique key
            await tx.commit()
        stored = await asyncio.wait_for(second, 20)
    finally:
        await other.dispose()
    assert stored.repeats == 1
    _assert_one_first_and_one_repeat(await _rows(pg_repo))
    assert (await _batch_repeats(pg_repo))[stored.batch_id] == 1

"""PostgreSQL connections are pinged before use only after sitting idle, and a dead idle one is replaced.

The server ends a pooled connection's backend (what a restart, a failover or a firewall's idle timeout does);
the next transaction must get a working connection instead of failing. A connection checked in a moment ago
is used without a ping: a ping on every checkout is a round trip before every transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from remediator.store import db


@pytest.fixture
async def engine(pg_url: str) -> AsyncIterator[AsyncEngine]:
    engine = db.make_engine(pg_url)
    yield engine
    await engine.dispose()


async def backend(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def terminate(pg_url: str, pid: int) -> None:
    admin = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()


def count_pings(engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    dialect = engine.sync_engine.dialect
    real = dialect.do_ping
    pings: list[int] = []

    def ping(dbapi_connection: Any) -> bool:
        pings.append(1)
        return bool(real(dbapi_connection))

    monkeypatch.setattr(dialect, "do_ping", ping)
    return pings


async def test_a_dropped_idle_connection_is_replaced_before_use(
    engine: AsyncEngine, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await backend(engine)
    await terminate(pg_url, first)
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)  # it has been idle long enough
    pings = count_pings(engine, monkeypatch)
    second = await backend(engine)
    assert second != first and len(pings) == 1


async def test_a_connection_used_a_moment_ago_is_not_pinged(
    engine: AsyncEngine, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await backend(engine)
    pings = count_pings(engine, monkeypatch)
    assert await backend(engine) == first  # the same pooled connection, no ping
    assert pings == []
    # Dropped within the idle window, it is found dead by the transaction itself, which fails (and its
    # caller retries): the case the ping after idle is for is the connection that sat unused.
    await terminate(pg_url, first)
    with pytest.raises(DBAPIError):
        await backend(engine)
    assert await backend(engine) != first

"""Database failures are classified once (store/availability.py), and the store's view of the database follows.

Through real servers: a transaction whose backend the server terminates (57P01, what a restart or a
failover does), a server that refuses connections, a SQLite file whose write lock another connection holds,
a real serialization failure: each is StoreUnavailable with its reason, counted as an outage or not, and the
next successful transaction clears it. A program error (a constraint, a bad statement) is left as it is.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, ProgrammingError

from remediator.errors import StoreUnavailable
from remediator.store.availability import DatabaseHealth, store_unavailable, transient_reason
from remediator.store.db import make_engine, make_sessionmaker, upgrade
from remediator.store.repository import Repository
from tests.controller_process import free_port


@pytest.fixture
async def pg_repo(pg_url: str) -> AsyncIterator[Repository]:
    await upgrade(pg_url)
    engine = make_engine(pg_url)
    yield Repository(make_sessionmaker(engine))
    await engine.dispose()


def _asyncpg_dsn(pg_url: str) -> str:
    return pg_url.replace("postgresql+asyncpg://", "postgresql://")


@pytest.mark.postgres
async def test_a_terminated_backend_is_store_unavailable_and_the_next_transaction_clears_it(
    pg_repo: Repository, pg_url: str
) -> None:
    admin = await asyncpg.connect(_asyncpg_dsn(pg_url))
    try:
        with pytest.raises(StoreUnavailable) as raised:
            async with pg_repo.transaction() as session:
                pid = (await session.execute(text("SELECT pg_backend_pid()"))).scalar_one()
                assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
                await asyncio.sleep(0.2)
                await session.execute(text("SELECT 1"))
    finally:
        await admin.close()
    assert raised.value.reason in ("shutdown", "unreachable")
    assert not pg_repo.health.up and pg_repo.health.problem is not None
    await pg_repo.ping()  # a new connection: the database answers again
    assert pg_repo.health.up and pg_repo.health.down_for() == 0


@pytest.mark.postgres
async def test_a_real_serialization_failure_is_transient_but_not_an_outage(pg_url: str) -> None:
    dsn = _asyncpg_dsn(pg_url)
    a, b = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        await a.execute("CREATE TABLE counter (n int); INSERT INTO counter VALUES (0)")
        ta, tb = a.transaction(isolation="serializable"), b.transaction(isolation="serializable")
        await ta.start()
        await tb.start()
        await a.fetchval("SELECT n FROM counter")
        await b.fetchval("SELECT n FROM counter")
        await a.execute("UPDATE counter SET n = n + 1")
        await ta.commit()
        with pytest.raises(asyncpg.SerializationError) as raised:
            await b.execute("UPDATE counter SET n = n + 1")
        await tb.rollback()
    finally:
        await a.close()
        await b.close()
    assert transient_reason(raised.value) == "conflict"
    error = store_unavailable(raised.value)
    assert error is not None and error.reason == "conflict"
    health = DatabaseHealth()
    health.failed(error)
    assert health.up  # one transaction's conflict: the database itself answers


async def test_a_refused_connection_is_an_outage_with_its_reason() -> None:
    engine = make_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nowhere")
    repo = Repository(make_sessionmaker(engine))
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await repo.ping()
        with pytest.raises(StoreUnavailable) as ready:
            await repo.check_ready(2.0)
    finally:
        await engine.dispose()
    assert raised.value.reason == "unreachable" and ready.value.reason == "unreachable"
    assert not repo.health.up and "unreachable" in (repo.health.problem or "")


@pytest.mark.postgres
async def test_program_errors_are_not_transient(pg_repo: Repository) -> None:
    with pytest.raises(ProgrammingError) as raised:
        async with pg_repo.transaction() as session:
            await session.execute(text("SELECT no_such_column FROM remediations"))
    assert transient_reason(raised.value) is None and store_unavailable(raised.value) is None
    assert pg_repo.health.up
    with pytest.raises(DBAPIError):
        async with pg_repo.transaction() as session:
            await session.execute(text("INSERT INTO alert_batches (id) VALUES (NULL)"))
    assert pg_repo.health.up
    with pytest.raises(ValueError, match="the caller's own"):
        async with pg_repo.transaction():
            raise ValueError("the caller's own")


async def test_a_locked_sqlite_file_is_unready_with_reason_locked(tmp_path: Path) -> None:
    database = tmp_path / "store.db"
    url = f"sqlite+aiosqlite:///{database}"
    await upgrade(url)
    engine = make_engine(url)
    repo = Repository(make_sessionmaker(engine))
    locker = sqlite3.connect(database, isolation_level=None)
    try:
        await repo.check_ready(1.0)
        locker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable) as raised:
            await repo.check_ready(1.0)
        assert raised.value.reason == "locked"
        assert not repo.health.up and repo.health.down_for() > 0
        locker.execute("ROLLBACK")
        await repo.check_ready(1.0)
        assert repo.health.up
    finally:
        locker.close()
        await engine.dispose()


async def test_a_sqlite_file_that_vanished_is_reported_not_created(tmp_path: Path) -> None:
    database = tmp_path / "store.db"
    url = f"sqlite+aiosqlite:///{database}"
    await upgrade(url)
    engine = make_engine(url)
    repo = Repository(make_sessionmaker(engine))
    try:
        database.rename(tmp_path / "moved.db")
        with pytest.raises(StoreUnavailable) as raised:
            await repo.check_ready(1.0)
    finally:
        await engine.dispose()
    assert raised.value.reason == "unavailable"
    assert not database.exists()


def test_guard_problems_come_first_and_count_from_when_they_began() -> None:
    now = [100.0]

    class Guard:
        problem: str | None = "replica guard not held: cannot reach PostgreSQL"
        problem_since: float | None = 90.0

    health = DatabaseHealth(clock=lambda: now[0])
    assert health.up and health.down_for() == 0
    health.guard = Guard()
    assert not health.up and health.down_for() == 10.0
    error = StoreUnavailable("connection refused")
    error.reason = "unreachable"
    health.failed(error)
    assert health.problem == Guard.problem and health.down_for() == 10.0
    Guard.problem, Guard.problem_since = None, None
    assert health.problem == "unreachable: connection refused"
    now[0] = 130.0
    health.answered()
    assert health.up and health.down_for() == 0

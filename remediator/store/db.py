"""Database engine set-up and schema migrations, for SQLite (embedded default) and PostgreSQL (replicas).

SQLite runs in WAL mode and every transaction that may write starts with BEGIN IMMEDIATE, so writers queue
instead of failing half-way with SQLITE_BUSY (read-only ones start deferred and run beside them); PostgreSQL
serializes the few global decisions with advisory locks.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import TypeAlias

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

__all__ = [
    "MIGRATIONS_DIR", "READ_ONLY", "StoreEngine", "describe_database", "make_engine", "make_sessionmaker",
    "missing_database", "parse_url", "upgrade", "upgrade_sync",
]

StoreEngine: TypeAlias = AsyncEngine
"""The database engine `make_engine` returns, as code outside the store names it (to dispose of it)."""

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
READ_ONLY = "remediator_read_only"  # execution option of the engine that read-only transactions use
BUSY_TIMEOUT_S = 30  # how long a SQLite writer waits for another connection's write lock before it fails
PING_AFTER_IDLE_S = 5.0  # a PostgreSQL connection idle this long in the pool is pinged before it is used
_IDLE_SINCE = "remediator_idle_since"  # pool record info key: when the connection was checked in


def make_engine(url: str, *, echo: bool = False) -> AsyncEngine:
    """An async engine with the per-dialect settings this project relies on."""
    if url.startswith("sqlite"):
        engine = create_async_engine(url, echo=echo, connect_args={"timeout": BUSY_TIMEOUT_S})
        sync = engine.sync_engine

        @event.listens_for(sync, "connect")
        def _on_connect(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
            # aiosqlite's adapted connection: autocommit at the driver, so the BEGIN below is ours
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
            cursor.close()

        @event.listens_for(sync, "invalidate")
        def _on_invalidate(
            dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry, _exception: BaseException | None
        ) -> None:
            _roll_back_before_close(dbapi_connection)

        @event.listens_for(sync, "begin")
        def _on_begin(conn: Connection) -> None:
            # A read-only transaction (Repository.reading) starts deferred: it takes no write lock, so it
            # runs beside the writer instead of queueing behind it.
            conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")

        return engine
    # Up to 20 connections kept open, 30 at most (a replica's worker slots, admissions and intake together).
    engine = create_async_engine(url, echo=echo, pool_size=20, max_overflow=10)
    _ping_after_idle(engine)
    return engine


def _ping_after_idle(engine: AsyncEngine) -> None:
    """Ping a pooled connection before use only when it sat idle for PING_AFTER_IDLE_S or longer.

    A connection that went idle is the one a restarted server, a failover or a firewall's idle timeout may
    have dropped; one checked in a moment ago has just answered. SQLAlchemy's `pool_pre_ping` pings on every
    checkout: a round trip before every transaction, about 5% of a replica's CPU in a storm. A dead connection
    found here is replaced before the transaction starts; one that dies mid-transaction fails that transaction
    (StoreUnavailable, retried by its caller) and invalidates the pool's older connections, as before.
    """
    sync = engine.sync_engine

    @event.listens_for(sync, "checkin")
    def _idle_since(_dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(sync, "checkout")
    def _ping_if_idle(
        dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry, _proxy: PoolProxiedConnection
    ) -> None:
        since = record.info.pop(_IDLE_SINCE, None)
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_S:
            return
        try:
            sync.dialect.do_ping(dbapi_connection)
        # broad: a DBAPI driver's ping raises its own classes; any of them means the pooled connection is dead
        # (DisconnectionError: reconnect)
        except Exception as exc:
            idle = time.monotonic() - since
            raise DisconnectionError(f"pooled connection failed its ping after {idle:.0f} s idle") from exc


def _roll_back_before_close(dbapi_connection: DBAPIConnection) -> None:
    """Queue a ROLLBACK on an invalidated aiosqlite connection's own thread, ahead of its close.

    SQLAlchemy invalidates a connection whose task was cancelled inside a statement (a worker stopping, a
    client hanging up) and closes it. The cancelled statement's cursor is never finalized, so SQLite keeps
    the closed connection alive as a zombie, with its transaction and the database's write lock, until the
    garbage collector happens to free that cursor: every writer of the process then waited out the 30 s busy
    timeout and failed. Rolled back first, the zombie holds no lock.
    """
    connection = getattr(dbapi_connection, "_connection", None)  # the aiosqlite.Connection
    raw = getattr(connection, "_connection", None)  # its sqlite3.Connection; None once closed
    queue = getattr(connection, "_tx", None)
    if raw is None or queue is None:
        return

    def rollback() -> None:
        if raw.in_transaction:
            raw.rollback()

    queue.put_nowait((None, rollback))  # the thread runs its queue in order: after the statement, before close


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def _alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade_sync(url: str, revision: str = "head") -> None:
    """Apply migrations (blocking; runs its own event loop inside Alembic's env)."""
    command.upgrade(_alembic_config(url), revision)


async def upgrade(url: str, revision: str = "head") -> None:
    """Apply migrations from async code (Alembic's env runs its own loop, so use a thread)."""
    await asyncio.to_thread(upgrade_sync, url, revision)


def parse_url(url: str) -> URL:
    """A database URL's parts (backend, database, host; rendered without its password)."""
    return make_url(url)


def describe_database(url: str) -> str:
    """The database a URL names, for a message: a SQLite file by its absolute path, another database by its
    URL without the password."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"the SQLite database {os.path.abspath(parsed.database or ':memory:')}"
    return f"the database {parsed.render_as_string(hide_password=True)}"


def missing_database(url: str) -> str | None:
    """The SQLite file a URL names when there is no such file (a reader must not create it); else None."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and not os.path.exists(parsed.database):
        return parsed.database
    return None

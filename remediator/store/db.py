"""Database engine set-up and schema migrations, for SQLite (embedded default) and PostgreSQL (replicas).

SQLite runs in WAL mode and every transaction that may write starts with BEGIN IMMEDIATE, so writers queue
instead of failing half-way with SQLITE_BUSY (read-only ones start deferred and run beside them); PostgreSQL
serializes the few global decisions with advisory locks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

__all__ = ["MIGRATIONS_DIR", "READ_ONLY", "make_engine", "make_sessionmaker", "upgrade", "upgrade_sync"]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
READ_ONLY = "remediator_read_only"  # execution option of the engine that read-only transactions use


def make_engine(url: str, *, echo: bool = False) -> AsyncEngine:
    """An async engine with the per-dialect settings this project relies on."""
    if url.startswith("sqlite"):
        engine = create_async_engine(url, echo=echo, connect_args={"timeout": 30})
        sync = engine.sync_engine

        @event.listens_for(sync, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        @event.listens_for(sync, "invalidate")
        def _on_invalidate(dbapi_connection: Any, _record: Any, _exception: BaseException | None) -> None:
            _roll_back_before_close(dbapi_connection)

        @event.listens_for(sync, "begin")
        def _on_begin(conn: Any) -> None:
            # A read-only transaction (Repository.reading) starts deferred: it takes no write lock, so it
            # runs beside the writer instead of queueing behind it.
            conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")

        return engine
    return create_async_engine(url, echo=echo, pool_size=10, max_overflow=20, pool_pre_ping=True)


def _roll_back_before_close(dbapi_connection: Any) -> None:
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

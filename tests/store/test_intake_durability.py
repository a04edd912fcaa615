"""A webhook batch is acknowledged only once it is on disk: the intake's SQLite connection fsyncs commits, and
waits out another process's write lock (a worker process) instead of failing."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from remediator.store.repository import Repository
from remediator.store.sqlite_intake import begin_immediate
from tests.store.test_intake_store import payload

_FULL = 2  # PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA


async def test_the_intake_connection_commits_with_synchronous_full(repo: Repository) -> None:
    stored = await repo.store_batch(payload(fingerprint="durable1"))
    assert stored.alerts == 1
    intake = repo._sqlite_intake  # the connection that committed the batch above
    assert intake is not None
    conn = intake._connection()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == _FULL


async def test_the_intake_waits_for_another_process_s_write_lock_and_then_stores(
    repo: Repository, tmp_path: Path
) -> None:
    """Another connection (the worker process's) holds SQLite's write lock: the intake neither fails nor
    stores early; it commits once the lock is free."""
    await repo.store_batch(payload(fingerprint="1f0000000000000a"))  # the file and the intake's connection exist
    other = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        store = asyncio.create_task(repo.store_batch(payload(fingerprint="2f0000000000000b")))
        await asyncio.sleep(0.3)
        assert not store.done()
        other.execute("COMMIT")
        stored = await asyncio.wait_for(store, 30)
    finally:
        other.close()
    assert stored.alerts == 1
    with sqlite3.connect(tmp_path / "store.db") as check:
        assert check.execute("SELECT count(*) FROM alerts WHERE fingerprint = '2f0000000000000b'").fetchone() == (1,)


async def test_an_error_other_than_a_held_lock_is_not_retried(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    conn.execute("BEGIN")
    with pytest.raises(sqlite3.OperationalError, match="within a transaction"):
        begin_immediate(conn)  # a bug (a transaction left open) fails at once instead of spinning 30 s
    conn.close()

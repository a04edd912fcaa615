"""A webhook batch is acknowledged only once it is on disk: the intake's SQLite connection fsyncs commits."""

from __future__ import annotations

from remediator.store.repository import Repository
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

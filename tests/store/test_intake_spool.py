"""The intake spool: with the worker in its own process, webhooks are stored in a file of their own (fsynced
before the 200, repeats counted at once) and the worker moves them into the database, once each."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from remediator.errors import StoreUnavailable
from remediator.intake.models import AlertmanagerPayload
from remediator.store.db import make_engine, make_sessionmaker
from remediator.store.intake_spool import IntakeSpool, spool_path
from remediator.store.repository import Repository
from tests.helpers import am_payload, shipped_xid_alert

_FULL = 2  # PRAGMA synchronous


@pytest.fixture
async def web(repo: Repository, tmp_path: Path) -> AsyncIterator[Repository]:
    """The web process's store on the same database file: its webhooks go to the spool."""
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
    store = Repository(make_sessionmaker(engine))
    await store.spool_webhooks()
    yield store
    await store.close()
    await engine.dispose()


def xid_79(node: str) -> AlertmanagerPayload:
    """GPUXidError 79 on `node`, exactly as the shipped rule delivers it (its fingerprint follows the node)."""
    return AlertmanagerPayload.model_validate(am_payload(shipped_xid_alert(node, 79)))


def spooled_alerts(tmp_path: Path) -> int:
    with sqlite3.connect(spool_path(tmp_path / "store.db")) as conn:
        return int(conn.execute("SELECT coalesce(sum(alert_count), 0) FROM spooled").fetchone()[0])


def database_rows(tmp_path: Path, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(tmp_path / "store.db") as conn:
        return list(conn.execute(query))


def test_the_spool_lies_beside_the_database() -> None:
    assert spool_path(Path("/data/remediator.db")) == Path("/data/remediator.intake.db")
    assert spool_path(Path("/data/state")) == Path("/data/state.intake")


async def test_a_spooled_batch_is_acknowledged_fsynced_and_moved_once(
    web: Repository, repo: Repository, tmp_path: Path
) -> None:
    stored = await web.store_batch(xid_79("a1"))
    assert (stored.alerts, stored.repeats) == (1, 0)
    assert database_rows(tmp_path, "SELECT count(*) FROM alerts") == [(0,)]  # acknowledged into the spool only
    assert spooled_alerts(tmp_path) == 1
    spool = web._spool
    assert spool is not None and spool._conn is not None
    assert spool._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert spool._conn.execute("PRAGMA synchronous").fetchone()[0] == _FULL

    assert await repo.move_spooled(1000) == 1
    assert await repo.move_spooled(1000) == 0
    assert spooled_alerts(tmp_path) == 0
    claimed = await repo.claim_alerts("w1", 10, timedelta(seconds=30))
    assert [(a.labels["Hostname"], a.batch_id, a.state) for a in claimed] == [("a1", stored.batch_id, "new")]
    received = database_rows(tmp_path, f"SELECT received_at FROM alert_batches WHERE id = '{stored.batch_id}'")
    assert len(received) == 1 and str(received[0][0]).startswith("20")


async def test_repeats_are_counted_against_the_spool_and_the_database(
    web: Repository, repo: Repository, tmp_path: Path
) -> None:
    first = await web.store_batch(xid_79("b1"))
    still_spooled = await web.store_batch(xid_79("b1"))
    assert (first.repeats, still_spooled.repeats) == (0, 1)
    assert await repo.move_spooled(1000) == 2
    after_move = await web.store_batch(xid_79("b1"))
    in_one_group = await web.store_batches([xid_79("b2"), xid_79("b2")])
    assert after_move.repeats == 1
    assert [s.repeats for s in in_one_group] == [0, 1]
    await repo.move_spooled(1000)
    by_node = "SELECT json_extract(labels, '$.Hostname') AS node, state FROM alerts ORDER BY node, state"
    rows = database_rows(tmp_path, by_node)
    assert rows == [("b1", "new"), ("b1", "repeat"), ("b1", "repeat"), ("b2", "new"), ("b2", "repeat")]
    assert len(await repo.claim_alerts("w1", 10, timedelta(seconds=30))) == 2  # repeats are never claimable


async def test_a_move_interrupted_after_its_commit_is_not_repeated(
    web: Repository, repo: Repository, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between the move's commit into the database and its removal from the spool: the next move finds
    the batch in the database and only removes it."""
    await web.store_batch(xid_79("c1"))

    async def crash(*args: object, **kwargs: object) -> None:
        raise StoreUnavailable("killed")

    with monkeypatch.context() as patch:
        patch.setattr(IntakeSpool, "forget", crash)
        with pytest.raises(StoreUnavailable):
            await repo.move_spooled(1000)
    assert database_rows(tmp_path, "SELECT count(*) FROM alerts") == [(1,)]
    assert spooled_alerts(tmp_path) == 1
    assert await repo.move_spooled(1000) == 1  # taken from the spool, not inserted again
    assert spooled_alerts(tmp_path) == 0
    assert database_rows(tmp_path, "SELECT count(*) FROM alerts") == [(1,)]


async def test_moves_take_the_oldest_batches_up_to_the_limit(web: Repository, repo: Repository) -> None:
    for i in range(5):
        await web.store_batch(xid_79(f"d{i}"))
    assert await repo.move_spooled(2) == 2
    assert await repo.move_spooled(2) == 2
    assert await repo.move_spooled(2) == 1
    claimed = await repo.claim_alerts("w1", 10, timedelta(seconds=30))
    assert [a.labels["Hostname"] for a in claimed] == [f"d{i}" for i in range(5)]


async def test_a_body_that_cannot_be_read_back_is_kept_apart_not_lost(
    web: Repository, repo: Repository, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await web.store_batch(xid_79("e1"))
    with sqlite3.connect(spool_path(tmp_path / "store.db")) as conn:
        conn.execute("UPDATE spooled SET body = CAST('{\"version\": \"3\"}' AS BLOB)")
    await web.store_batch(xid_79("e2"))
    with caplog.at_level(logging.ERROR):
        assert await repo.move_spooled(1000) == 2  # both taken from the spool: one moved, one kept apart
    assert "cannot be read back" in caplog.text
    assert [a.labels["Hostname"] for a in await repo.claim_alerts("w1", 10, timedelta(seconds=30))] == ["e2"]
    with sqlite3.connect(spool_path(tmp_path / "store.db")) as conn:
        kept = conn.execute("SELECT body, error FROM rejected").fetchall()
    assert len(kept) == 1 and b'"version": "3"' in kept[0][0] and "version" in kept[0][1]
    assert spooled_alerts(tmp_path) == 0


async def test_a_webhook_is_stored_while_another_process_holds_the_database_s_write_lock(
    web: Repository, tmp_path: Path
) -> None:
    """The point of the spool: the worker process's write transactions never hold a webhook up."""
    await web.store_batch(xid_79("f0"))
    worker = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    worker.execute("BEGIN IMMEDIATE")
    try:
        stored = await asyncio.wait_for(web.store_batch(xid_79("f1")), 20)
    finally:
        worker.execute("ROLLBACK")
        worker.close()
    assert stored.alerts == 1
    assert spooled_alerts(tmp_path) == 2


async def test_without_a_spool_file_there_is_nothing_to_move(repo: Repository, tmp_path: Path) -> None:
    await repo.store_batch(xid_79("g1"))  # straight into the database
    assert await repo.move_spooled(1000) == 0
    assert not spool_path(tmp_path / "store.db").exists()


async def test_a_spool_replaced_by_another_file_refuses_webhooks_and_the_worker_moves_what_it_held(
    web: Repository, repo: Repository, tmp_path: Path
) -> None:
    """A copy put in its place (a restore, a remount) is not the file the web process writes: webhooks are
    refused with the reason, and the worker still reads and moves the batch from the file it holds."""
    problems: list[str] = []
    web.watch_spool(problems.append)
    await web.store_batch(xid_79("r1"))
    assert await repo.spooled_alert_count() == 1  # the worker holds the file from here on
    spool = spool_path(tmp_path / "store.db")
    spool.rename(tmp_path / "elsewhere.db")
    spool.write_bytes(b"")  # an empty file where the spool was
    with pytest.raises(StoreUnavailable, match="was replaced by another file while in use"):
        await web.store_batch(xid_79("r2"))
    assert "replaced by another file" in (await web.spool_problem() or "")
    assert problems == ["displaced"]
    assert await repo.spooled_alert_count() == 1  # never "empty" for a file no longer at the path
    assert await repo.move_spooled(100) == 1
    assert database_rows(tmp_path, "SELECT count(*) FROM alerts") == [(1,)]
    assert await repo.spooled_alert_count() == 0
    assert spool.read_bytes() == b""  # the file put there is left alone


async def test_a_wal_left_without_its_spool_is_set_aside_before_a_fresh_spool_starts(
    repo: Repository, tmp_path: Path
) -> None:
    """A -wal whose main file was removed (then a crash) belongs to no spool: read as the fresh spool's own, its
    frames would come back as batches; it is renamed aside instead."""
    spool = spool_path(tmp_path / "store.db")
    old = sqlite3.connect(tmp_path / "old.db")
    old.execute("PRAGMA journal_mode=WAL")
    old.execute("CREATE TABLE spooled (seq INTEGER PRIMARY KEY, batch_id TEXT, received_at TEXT, "
                "alert_count INTEGER, body BLOB)")
    Path(f"{tmp_path / 'old.db'}-wal").rename(f"{spool}-wal")
    old.close()
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
    web = Repository(make_sessionmaker(engine))
    try:
        await web.spool_webhooks()
        await web.store_batch(xid_79("w1"))
        assert spooled_alerts(tmp_path) == 1
    finally:
        await web.close()
        await engine.dispose()
    assert [p.name.rsplit("-", 1)[-1] for p in tmp_path.glob(f"{spool.name}.damaged-*")] == ["wal"]

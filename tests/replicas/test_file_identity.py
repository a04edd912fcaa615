"""The single-replica guard on SQLite guards the database file, not its name.

A hard link reaches the same file under another name (and another `.lock` file beside it); two controllers
on it would write one database through two write-ahead logs. The second is refused like any second replica.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from remediator.errors import ReplicaGuardError
from remediator.store.replica_guard import SqliteFileGuard
from tests.cli.test_cli import run
from tests.controller_process import ControllerProcess, free_port

pytestmark = pytest.mark.timeout(240)

_TRY_WRITE = """
import sqlite3, sys
try:
    sqlite3.connect(sys.argv[1], timeout=0).execute("BEGIN IMMEDIATE")
    print("written")
except sqlite3.OperationalError as exc:
    print("locked" if "locked" in str(exc) else exc)
"""


@pytest.mark.parametrize("worker_process", ["false", "true"])
async def test_a_hard_link_to_the_database_is_refused_as_a_second_replica(
    tmp_path: Path, processes: list[ControllerProcess], worker_process: str
) -> None:
    db = tmp_path / "one.db"
    first = ControllerProcess(
        tmp_path, {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{db}", "REMEDIATOR_WORKER_PROCESS": worker_process},
        name="first",
    )
    processes.append(first)
    await first.start()
    other = tmp_path / "elsewhere"
    other.mkdir()
    link = other / "two.db"
    os.link(db, link)
    second = await asyncio.to_thread(run, "serve", "--port", str(free_port()), env={
        "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{link}", "REMEDIATOR_REPLICA_ID": "second",
    })
    assert second.returncode == 6, second.stderr
    assert second.stderr.count("\n") == 1 and second.stderr.startswith("error: "), second.stderr
    assert "another controller replica" in second.stderr and "hard link" in second.stderr
    assert str(link) in second.stderr
    assert first.proc is not None and first.proc.poll() is None
    assert not (other / "two.intake.db").exists()  # refused before it wrote anything beside the link


def test_the_guard_refuses_a_hard_link_in_one_process_and_keeps_sqlite_s_locks_when_released(
    tmp_path: Path,
) -> None:
    """In one process too, the link is refused while the guard is held and admitted once it is released; the
    release leaves the database file's descriptor open, because closing one would drop SQLite's POSIX locks
    on the file (a second SQLite connection's lock is the witness: it stays held across the release)."""
    db = tmp_path / "one.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x)")
    first = SqliteFileGuard(db, "first")
    first.acquire()
    os.link(db, tmp_path / "two.db")
    second = SqliteFileGuard(tmp_path / "two.db", "second")
    with pytest.raises(ReplicaGuardError, match="hard link"):
        second.acquire()
    conn.execute("BEGIN IMMEDIATE")  # a RESERVED lock: a POSIX lock of this process on the database file
    first.release()
    # Another process (within one, SQLite shares its locks without the kernel) finds the lock still held.
    probe = subprocess.run([sys.executable, "-c", _TRY_WRITE, str(db)], capture_output=True, text=True, timeout=30)
    assert probe.stdout.strip() == "locked", probe.stdout + probe.stderr
    conn.execute("ROLLBACK")
    conn.close()
    second.acquire()
    second.release()

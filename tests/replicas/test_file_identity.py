"""The single-replica guard on SQLite guards the database file, not its name.

A hard link reaches the same file under another name (and another `.lock` file beside it); two controllers
on it would write one database through two write-ahead logs. The second is refused like any second replica.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.cli.test_cli import run
from tests.controller_process import ControllerProcess, free_port

pytestmark = pytest.mark.timeout(240)


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

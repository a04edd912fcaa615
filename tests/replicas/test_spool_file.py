"""The intake spool's file is watched while `serve` runs with REMEDIATOR_WORKER_PROCESS.

Removed under a running controller, the spool no longer acknowledges webhooks (503 with the reason, /readyz
503, an ERROR line and a metric) and every webhook acknowledged before the removal still reaches the
database through the file the worker process holds. Truncated, it is set aside under a timestamped name, a
fresh spool starts and webhooks are stored again without a restart; a damaged spool found at start is set
aside the same way.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from remediator.store.intake_spool import spool_path
from tests.controller_process import ControllerProcess
from tests.helpers import am_payload, shipped_xid_alert
from tests.replicas.test_guard import wait_until
from tests.replicas.test_worker_process import started, worker_pid

pytestmark = pytest.mark.timeout(240)


def _xid(n: int) -> dict[str, object]:
    """A webhook with one distinct GPUXidError (its own node, so its own alert)."""
    return am_payload(shipped_xid_alert(f"gpu-{n}", 79))


def _alerts_in_database(database: Path) -> int:
    with sqlite3.connect(database) as conn:
        return int(conn.execute("SELECT count(*) FROM alerts").fetchone()[0])


async def alerts_reach(database: Path, count: int, what: str) -> None:
    """Wait up to 60 s for the database to hold `count` alerts; `what` names the wait in the failure."""

    async def there() -> bool:
        return _alerts_in_database(database) == count

    await wait_until(there, 60, what)


def _metric(text: str, sample: str) -> float:
    found = [line.split()[-1] for line in text.splitlines() if line.startswith(sample + " ")]
    return float(found[0]) if found else 0.0


async def test_a_spool_removed_mid_run_refuses_webhooks_and_loses_nothing_acknowledged(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    database = tmp_path / "c.db"
    ctl = await started(tmp_path, processes)
    async with httpx.AsyncClient(base_url=ctl.url, timeout=30) as client:
        assert (await client.post("/api/v1/alerts", json=_xid(0))).status_code == 200

        await alerts_reach(database, 1, "the worker process to move the first webhook (it holds the spool)")
        worker = worker_pid(ctl)
        os.kill(worker, signal.SIGSTOP)  # acknowledged, not yet moved, when the file goes
        try:
            for n in range(1, 11):
                assert (await client.post("/api/v1/alerts", json=_xid(n))).status_code == 200
            os.unlink(spool_path(database))
            refused = [await client.post("/api/v1/alerts", json=_xid(n)) for n in range(11, 16)]
        finally:
            os.kill(worker, signal.SIGCONT)
        for answer in refused:  # not 200-then-lost
            assert answer.status_code == 503, answer.text
            assert "was removed while in use" in answer.json()["error"]
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["status"] == "intake spool unavailable"
        assert "was removed while in use" in ready.json()["error"]

        await alerts_reach(database, 11, "the ten webhooks acknowledged before the removal to reach the database")
        metrics = (await client.get("/metrics")).text
        assert _metric(metrics, 'remediator_intake_spool_problems_total{problem="displaced"}') == 1
        # The worker still reads the file it holds: nothing left in it, and it said so without the file.
        undecided = 'remediator_alerts_undecided{where="spooled"}'

        async def spool_empty() -> bool:
            return _metric((await client.get("/metrics")).text, undecided) == 0

        await wait_until(spool_empty, 30, "the spooled gauge to read 0 from the file still held")
        assert (await client.post("/api/v1/alerts", json=_xid(20))).status_code == 503
    assert _alerts_in_database(database) == 11
    assert "ERROR remediator.store.intake_spool: intake spool" in ctl.output()


async def test_a_spool_truncated_mid_run_is_set_aside_and_intake_recovers(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    database = tmp_path / "c.db"
    spool = spool_path(database)
    ctl = await started(tmp_path, processes)
    async with httpx.AsyncClient(base_url=ctl.url, timeout=30) as client:
        assert (await client.post("/api/v1/alerts", json=_xid(0))).status_code == 200

        await alerts_reach(database, 1, "the worker process to move the first webhook")
        os.truncate(spool, 0)
        stored: list[int] = []
        deadline = time.monotonic() + 30
        n = 1
        while len(stored) < 5 and time.monotonic() < deadline:
            began = time.monotonic()
            answer = await client.post("/api/v1/alerts", json=_xid(n))
            assert time.monotonic() - began < 5, "a webhook waited on the damaged spool"
            assert answer.status_code in (200, 503), answer.text
            if answer.status_code == 200:
                stored.append(n)
            else:
                assert "intake spool" in answer.json()["error"]
                await asyncio.sleep(0.2)
            n += 1
        assert len(stored) == 5, "intake did not recover from the truncated spool"

        await alerts_reach(database, 1 + len(stored), "the webhooks stored in the fresh spool to reach the database")
        assert (await client.get("/readyz")).status_code == 200
        metrics = (await client.get("/metrics")).text
        assert _metric(metrics, 'remediator_intake_spool_problems_total{problem="damaged"}') == 1
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(f"{spool.name}.damaged-") and p.name[-4:] != "-wal"
             and not p.name.endswith("-shm")]
    assert len(aside) == 1, sorted(p.name for p in tmp_path.iterdir())
    assert ctl.proc is not None and ctl.proc.poll() is None
    assert "is damaged (truncated from" in ctl.output()


async def test_a_damaged_spool_found_at_start_is_set_aside(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    database = tmp_path / "c.db"
    spool = spool_path(database)
    first = await started(tmp_path, processes, "first")
    await first.stop()
    spool.write_bytes(b"SQLite format 3\x00" + b"\x07" * 200)  # a header, then nothing of a database
    second = await started(tmp_path, processes, "second")
    async with httpx.AsyncClient(base_url=second.url, timeout=30) as client:
        assert (await client.post("/api/v1/alerts", json=_xid(1))).status_code == 200

        await alerts_reach(database, 1, "the webhook stored in the fresh spool to reach the database")
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(f"{spool.name}.damaged-")]
    assert [p.read_bytes()[:16] for p in aside] == [b"SQLite format 3\x00"]
    assert "set aside as" in second.output()

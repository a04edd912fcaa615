"""`remediator serve` with REMEDIATOR_WORKER_PROCESS: the worker in a second process on the same SQLite file.

The web process stores webhooks and serves the API; the worker process decides and remediates. One scrape
shows both processes' metrics; the controller stops (exit 8) when its worker process dies; a worker process
that outlives its web process keeps the single-replica guard until it has exited too; SIGHUP reaches both.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
from pathlib import Path

import httpx
import pytest

from remediator.store.intake_spool import spool_path
from tests.cli.test_cli import run
from tests.controller_process import ControllerProcess, free_port
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.fakekube.server import FakeKube
from tests.helpers import am_payload, shipped_xid_alert
from tests.replicas.test_guard import TOKEN, _env, _rems, wait_until

pytestmark = pytest.mark.timeout(240)
WORKER = {"REMEDIATOR_WORKER_PROCESS": "true"}
ONE_PROCESS = {"REMEDIATOR_WORKER_PROCESS": "false"}


def worker_env(tmp_path: Path) -> dict[str, str]:
    """A controller on its own SQLite file, with the worker in its own process."""
    return {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", **WORKER}


async def started(tmp_path: Path, processes: list[ControllerProcess], name: str = "controller") -> ControllerProcess:
    ctl = ControllerProcess(tmp_path, worker_env(tmp_path), name=name)
    processes.append(ctl)
    await ctl.start()
    return ctl


def one_gpu_node(fake: FakeKube) -> None:
    fake.add_namespace("ml")
    fake.add_node("gpu-1", labels={"nvidia.com/gpu.present": "true"})
    fake.add_pod("gpu-1-a", "ml", node="gpu-1", gpus=4, labels={"app": "t"})


def cluster_env(tmp_path: Path, fake: FakeKube) -> dict[str, str]:
    """A controller on its own SQLite file, talking to `fake` (add WORKER for the worker process)."""
    return _env(worker_env(tmp_path)["REMEDIATOR_DATABASE_URL"], write_kubeconfig(tmp_path / "kubeconfig", fake.url))


async def post_xid_79(ctl: ControllerProcess) -> httpx.Response:
    """GPUXidError 79 on gpu-1, as the shipped rule delivers it."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=20) as client:
        return await client.post(f"{ctl.url}/api/v1/alerts", json=am_payload(shipped_xid_alert("gpu-1", 79)))


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):  # a child belongs to the thread that started it
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return found


def worker_pid(ctl: ControllerProcess) -> int:
    assert ctl.proc is not None
    found = [c for c in children(ctl.proc.pid)
             if b"remediator.engine.worker_process" in Path(f"/proc/{c}/cmdline").read_bytes()]
    assert len(found) == 1, found
    return found[0]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def test_alerts_are_decided_and_remediated_in_the_worker_process(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    url = worker_env(tmp_path)["REMEDIATOR_DATABASE_URL"]
    async with FakeKube() as fake:
        one_gpu_node(fake)
        ctl = ControllerProcess(tmp_path, {**cluster_env(tmp_path, fake), **WORKER})
        processes.append(ctl)
        await ctl.start()
        worker = worker_pid(ctl)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
            r = await client.post(f"{ctl.url}/api/v1/alerts", json=am_payload(shipped_xid_alert("gpu-1", 79)))
            assert r.status_code == 200

            async def done() -> bool:
                rems = await _rems(url)
                return len(rems) == 1 and rems[0].state == "succeeded"

            await wait_until(done, 90, "the remediation to finish")
            assert fake.evicted_uids() and len(fake.evicted_uids()) == len(set(fake.evicted_uids()))
            assert (await client.get(f"{ctl.url}/readyz")).json() == {"status": "ready"}
            metrics = (await client.get(f"{ctl.url}/metrics")).text
        assert worker_pid(ctl) == worker  # the same worker process did all of it
        # One exposition: the web process's webhook counter and the worker's remediation counter, each
        # family declared once.
        assert 'remediator_alerts_received_total{status="firing"} 1.0' in metrics
        assert 'remediator_remediations_total{outcome="succeeded",playbook="reboot-node"} 1.0' in metrics
        assert "remediator_audit_verify_ok 1.0" in metrics
        assert metrics.count("# TYPE remediator_alerts_received_total counter") == 1
        assert metrics.count("# TYPE remediator_remediations_total counter") == 1


async def test_webhooks_are_answered_while_the_database_s_writer_is_held(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    """The web process stores webhooks in the intake spool: a write transaction on the database (here the
    test's, in production the worker process's decision batches) does not hold a webhook up; the worker
    process moves the batch in and decides it once the writer is free."""
    database = tmp_path / "c.db"
    async with FakeKube() as fake:
        one_gpu_node(fake)
        ctl = ControllerProcess(tmp_path, {**cluster_env(tmp_path, fake), **WORKER})
        processes.append(ctl)
        await ctl.start()
        writer = sqlite3.connect(database, isolation_level=None, timeout=30)
        writer.execute("BEGIN IMMEDIATE")
        try:
            assert (await post_xid_79(ctl)).status_code == 200
        finally:
            writer.execute("ROLLBACK")
            writer.close()

        async def decided() -> bool:
            with sqlite3.connect(database) as conn:
                return conn.execute("SELECT state FROM alerts").fetchall() == [("done",)]

        await wait_until(decided, 60, "the worker process to move the spooled alert in and decide it")
        with sqlite3.connect(spool_path(database)) as conn:
            assert conn.execute("SELECT count(*) FROM spooled").fetchone() == (0,)


async def test_webhooks_spooled_before_a_crash_are_decided_after_a_restart_without_a_worker_process(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    """kill -9 of both processes while an acknowledged webhook is still in the spool (the worker process
    stopped, so it never moved it); the next start, one process this time, moves it in and decides it."""
    database = tmp_path / "c.db"
    url = worker_env(tmp_path)["REMEDIATOR_DATABASE_URL"]
    async with FakeKube() as fake:
        one_gpu_node(fake)
        env = cluster_env(tmp_path, fake)
        first = ControllerProcess(tmp_path, {**env, **WORKER}, name="first")
        processes.append(first)
        await first.start()
        worker = worker_pid(first)
        os.kill(worker, signal.SIGSTOP)
        try:
            assert (await post_xid_79(first)).status_code == 200
        finally:
            os.kill(worker, signal.SIGKILL)
            first.kill()
        with sqlite3.connect(spool_path(database)) as conn:
            assert conn.execute("SELECT sum(alert_count) FROM spooled").fetchone() == (1,)
        with sqlite3.connect(database) as conn:
            assert conn.execute("SELECT count(*) FROM alerts").fetchone() == (0,)

        second = ControllerProcess(tmp_path, {**env, **ONE_PROCESS}, name="second")
        processes.append(second)
        await second.start()
        assert second.proc is not None and not children(second.proc.pid)

        async def done() -> bool:
            rems = await _rems(url)
            return len(rems) == 1 and rems[0].state == "succeeded"

        await wait_until(done, 90, "the one-process controller to decide and remediate the spooled alert")
        with sqlite3.connect(database) as conn:
            assert conn.execute("SELECT state FROM alerts").fetchall() == [("done",)]


def _gauge(metrics: str, name: str) -> float:
    (line,) = [line for line in metrics.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


async def test_sighup_reloads_the_definitions_in_the_worker_process_too(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    ctl = await started(tmp_path, processes)
    name = "remediator_definitions_last_reload_timestamp_seconds"
    async with httpx.AsyncClient(timeout=30) as client:
        before = _gauge((await client.get(f"{ctl.url}/metrics")).text, name)  # a gauge: the worker's value
        assert ctl.proc is not None
        ctl.proc.send_signal(signal.SIGHUP)

        async def reloaded() -> bool:
            return _gauge((await client.get(f"{ctl.url}/metrics")).text, name) > before

        await wait_until(reloaded, 30, "the worker process to reload on the web process's SIGHUP")
    assert ctl.proc.poll() is None


async def test_the_controller_stops_when_its_worker_process_dies(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    ctl = await started(tmp_path, processes)
    os.kill(worker_pid(ctl), signal.SIGKILL)
    assert ctl.proc is not None
    code = await asyncio.wait_for(asyncio.to_thread(ctl.proc.wait), 60)
    assert code == 8
    assert "error: the worker process exited with code -9: stopped" in ctl.log.read_text()


async def test_a_worker_process_outliving_its_web_process_holds_the_guard(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    env = worker_env(tmp_path)
    first = await started(tmp_path, processes, "first")
    worker = worker_pid(first)
    os.kill(worker, signal.SIGSTOP)  # so that it cannot exit before the second controller tries
    try:
        first.kill()
        second = await asyncio.to_thread(run, "serve", "--port", str(free_port()), env=env)
        assert second.returncode == 6, second.stderr
        assert "another controller replica (first, pid" in second.stderr
    finally:
        os.kill(worker, signal.SIGCONT)

    async def gone() -> bool:
        return not alive(worker)

    await wait_until(gone, 60, "the orphaned worker process to see its web process gone and exit")
    third = await started(tmp_path, processes, "third")
    worker_pid(third)


async def test_a_worker_process_that_cannot_start_stops_serve_with_one_line(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    # Runs at the start of every Python process given this path; only the worker process has the link.
    (hook / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('REMEDIATOR_WORKER_LINK_FD'):\n    os._exit(3)\n"
    )
    env = {**worker_env(tmp_path), "PYTHONPATH": f"{hook}{os.pathsep}{Path(__file__).resolve().parents[2]}"}
    result = await asyncio.to_thread(run, "serve", "--port", str(free_port()), env=env)
    assert result.returncode == 8, result.stderr[-3000:]
    assert result.stderr.endswith("error: the worker process exited with code 3 before it started: stopped\n")
    assert "Traceback" not in result.stderr


async def test_settings_for_postgres_or_memory_are_refused() -> None:
    for url in ("postgresql+asyncpg://remediator@127.0.0.1:5432/test", "sqlite+aiosqlite:///:memory:"):
        result = await asyncio.to_thread(
            run, "serve", "--port", str(free_port()), env={"REMEDIATOR_DATABASE_URL": url, **WORKER})
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: REMEDIATOR_WORKER_PROCESS needs a SQLite database file")
        assert "Traceback" not in result.stderr


async def test_serve_on_a_sqlite_file_runs_the_worker_process_by_default(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    """No REMEDIATOR_WORKER_PROCESS at all: the shipped default on a SQLite file is two processes, webhooks
    answered from the spool while the database's writer is held, then moved in and decided."""
    database = tmp_path / "c.db"
    async with FakeKube() as fake:
        one_gpu_node(fake)
        ctl = ControllerProcess(tmp_path, cluster_env(tmp_path, fake))
        ctl.env.pop("REMEDIATOR_WORKER_PROCESS", None)  # whatever the test run's environment says
        processes.append(ctl)
        await ctl.start()
        worker = worker_pid(ctl)
        assert spool_path(database).exists()
        writer = sqlite3.connect(database, isolation_level=None, timeout=30)
        writer.execute("BEGIN IMMEDIATE")
        try:
            assert (await post_xid_79(ctl)).status_code == 200
            with sqlite3.connect(spool_path(database)) as conn:
                assert conn.execute("SELECT sum(alert_count) FROM spooled").fetchone() == (1,)
        finally:
            writer.execute("ROLLBACK")
            writer.close()

        async def done() -> bool:
            rems = await _rems(worker_env(tmp_path)["REMEDIATOR_DATABASE_URL"])
            return len(rems) == 1 and rems[0].state == "succeeded"

        await wait_until(done, 90, "the worker process to decide and remediate the spooled alert")
        assert worker_pid(ctl) == worker


@pytest.mark.postgres
async def test_serve_on_postgres_runs_one_process_by_default(
    tmp_path: Path, pg_url: str, processes: list[ControllerProcess]
) -> None:
    """PostgreSQL scales by replicas: no worker process by default, and no refusal as with WORKER_PROCESS=true."""
    ctl = ControllerProcess(tmp_path, {"REMEDIATOR_DATABASE_URL": pg_url})
    ctl.env.pop("REMEDIATOR_WORKER_PROCESS", None)
    processes.append(ctl)
    await ctl.start()
    assert ctl.proc is not None and not children(ctl.proc.pid)
    async with httpx.AsyncClient(timeout=20) as client:
        r = await client.post(f"{ctl.url}/api/v1/alerts", json=am_payload(shipped_xid_alert("gpu-1", 79)))
        assert r.status_code == 200, r.text

        async def decided() -> bool:
            alerts = (await client.get(f"{ctl.url}/api/v1/alerts")).json()
            return bool(alerts) and all(a["state"] == "done" for a in alerts)

        await wait_until(decided, 60, "the one process to decide the alert")
    assert not children(ctl.proc.pid)


def test_the_worker_process_setting_resolves_per_database() -> None:
    from remediator.engine.startup import resolve_worker_process
    from remediator.settings import Settings

    file, memory = "sqlite+aiosqlite:////data/r.db", "sqlite+aiosqlite:///:memory:"
    pg = "postgresql+asyncpg://remediator@127.0.0.1:5432/test"
    for url, given, expected in (
        (file, None, True), (memory, None, False), (pg, None, False),
        (file, False, False), (file, True, True), (pg, True, True),  # true with PostgreSQL: refused by prepare
    ):
        assert resolve_worker_process(Settings(database_url=url, worker_process=given)).worker_process is expected
    assert Settings(worker_process="auto").worker_process is None  # type: ignore[arg-type]

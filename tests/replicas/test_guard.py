"""The single-replica guard is a lock that dies with its holder.

kill -9 then an immediate restart on the same database picks up the acknowledged alerts and the
remediation in flight at once (the lease is ten minutes here, so nothing can wait for it); a second
controller is refused while the first lives, also with the same REPLICA_ID; on PostgreSQL a controller
whose guard connection dies takes the guard again, and stops only when another controller took it meanwhile;
ALLOW_MULTIPLE_REPLICAS still admits several replicas.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import select

from remediator.store.db import make_engine, make_sessionmaker
from remediator.store.models import AuditEvent, Remediation
from remediator.store.replica_guard import GUARD_KEY
from tests.cli.test_cli import run
from tests.controller_process import ControllerProcess, free_port
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.fakekube.server import FakeKube
from tests.helpers import am_payload, shipped_xid_alert
from tests.pgfixtures import PG_HOST, PG_PORT, PG_USER

TOKEN = "guard-token"
AUDIT_KEY = "guard-audit-key-0123456789abcdef"
pytestmark = pytest.mark.timeout(240)


async def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not await predicate():
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def _rems(url: str) -> list[Remediation]:
    engine = make_engine(url)
    try:
        async with make_sessionmaker(engine)() as session:
            return list((await session.scalars(select(Remediation).order_by(Remediation.created_at))).all())
    finally:
        await engine.dispose()


async def _audit_kinds(url: str) -> list[str]:
    engine = make_engine(url)
    try:
        async with make_sessionmaker(engine)() as session:
            return list((await session.scalars(select(AuditEvent.kind).order_by(AuditEvent.id))).all())
    finally:
        await engine.dispose()


def _env(url: str, kubeconfig: Path, **extra: str) -> dict[str, str]:
    return {
        "REMEDIATOR_DATABASE_URL": url, "REMEDIATOR_KUBECONFIG": str(kubeconfig),
        "REMEDIATOR_WEBHOOK_TOKEN": TOKEN, "REMEDIATOR_AUDIT_KEY": AUDIT_KEY,
        "REMEDIATOR_LEASE_DURATION": "10m", "REMEDIATOR_WORKER_POLL_INTERVAL": "100ms",
        "REMEDIATOR_REPLICA_ID": "controller-0", **extra,
    }


def _protected_node(fake: FakeKube, name: str) -> None:
    fake.add_node(name, labels={"nvidia.com/gpu.present": "true"})
    fake.add_pod(f"{name}-a", "ml", node=name, gpus=4, labels={"app": "t"})
    fake.add_pod(f"{name}-b", "ml", node=name, gpus=4, labels={"app": "t", "protected": name})
    fake.add_pdb(f"hold-{name}", "ml", match_labels={"protected": name}, min_available=1)


async def _kill_9_then_restart(
    tmp_path: Path, url: str, processes: list[ControllerProcess], *, also_kill: Callable[[int], None] | None = None,
    **extra: str,
) -> None:
    """`also_kill(pid)`: kill -9 what else the controller started, as a pod's end takes every process in it."""
    async with FakeKube() as fake:
        fake.add_namespace("ml")
        _protected_node(fake, "gpu-1")
        _protected_node(fake, "gpu-2")
        env = _env(url, write_kubeconfig(tmp_path / "kubeconfig", fake.url), **extra)
        first = ControllerProcess(tmp_path, env, name="first")
        processes.append(first)
        await first.start()
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
            r = await client.post(f"{first.url}/api/v1/alerts", json=am_payload(shipped_xid_alert("gpu-1", 79)))
            assert r.status_code == 200

            async def blocked() -> bool:
                return any(c.verb == "evict" and c.status == 429 for c in fake.calls)

            await wait_until(blocked, 60, "the first drain to be blocked by its PodDisruptionBudget")
            # Acknowledged, then the controller dies before (or while) working on it.
            r = await client.post(f"{first.url}/api/v1/alerts", json=am_payload(
                shipped_xid_alert("gpu-2", 79, uuid="GPU-8e6a1c2d-0000-4000-8000-000000000002")))
            assert r.status_code == 200
            if also_kill is not None:
                assert first.proc is not None
                also_kill(first.proc.pid)
            first.kill()
        fake.remove("poddisruptionbudgets", "ml", "hold-gpu-1")
        fake.remove("poddisruptionbudgets", "ml", "hold-gpu-2")

        second = ControllerProcess(tmp_path, env, name="second")  # same REPLICA_ID, as a restarted pod
        processes.append(second)
        await second.start()

        async def both_done() -> bool:
            rems = await _rems(url)
            return len(rems) == 2 and all(r.state == "succeeded" for r in rems)

        await wait_until(both_done, 90, "both remediations to finish after the restart")
        evicted = fake.evicted_uids()
        assert len(evicted) == len(set(evicted)) == 4  # every pod once: nothing done twice
        assert "replica.takeover" in await _audit_kinds(url)


async def test_sqlite_kill_9_then_immediate_restart_resumes_at_once(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    await _kill_9_then_restart(
        tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", processes, REMEDIATOR_WORKER_PROCESS="false")


async def test_sqlite_kill_9_with_a_worker_process_then_immediate_restart_resumes_at_once(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    from tests.replicas.test_worker_process import children

    def kill_worker(pid: int) -> None:
        (worker,) = children(pid)
        os.kill(worker, signal.SIGKILL)

    await _kill_9_then_restart(
        tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", processes, also_kill=kill_worker,
        REMEDIATOR_WORKER_PROCESS="true",
    )


@pytest.mark.postgres
async def test_postgres_kill_9_then_immediate_restart_resumes_at_once(
    tmp_path: Path, pg_url: str, processes: list[ControllerProcess]
) -> None:
    await _kill_9_then_restart(tmp_path, pg_url, processes)


async def _second_is_refused(tmp_path: Path, url: str, processes: list[ControllerProcess], **extra: str) -> str:
    env = {"REMEDIATOR_DATABASE_URL": url, "REMEDIATOR_REPLICA_ID": "same-id", **extra}
    first = ControllerProcess(tmp_path, env, name="first")
    processes.append(first)
    await first.start()
    second = await asyncio.to_thread(run, "serve", "--port", str(free_port()), env=env)
    assert second.returncode == 6, second.stderr
    assert second.stderr.count("\n") == 1 and second.stderr.startswith("error: "), second.stderr
    assert first.proc is not None and first.proc.poll() is None
    return second.stderr


async def test_sqlite_second_controller_with_the_same_replica_id_is_refused(
    tmp_path: Path, processes: list[ControllerProcess]
) -> None:
    db = tmp_path / "one.db"
    message = await _second_is_refused(tmp_path, f"sqlite+aiosqlite:///{db}", processes)
    assert "another controller replica (same-id, pid" in message and str(db) in message


@pytest.mark.postgres
async def test_postgres_second_controller_with_the_same_replica_id_is_refused(
    tmp_path: Path, pg_url: str, processes: list[ControllerProcess]
) -> None:
    message = await _second_is_refused(tmp_path, pg_url, processes)
    assert "another controller replica (same-id)" in message and "ALLOW_MULTIPLE_REPLICAS" in message


@pytest.mark.postgres
async def test_multiple_replicas_need_distinct_ids_and_exclude_a_sole_controller(
    tmp_path: Path, pg_url: str, processes: list[ControllerProcess]
) -> None:
    multi = {"REMEDIATOR_ALLOW_MULTIPLE_REPLICAS": "true"}
    a = ControllerProcess(tmp_path, {"REMEDIATOR_DATABASE_URL": pg_url, **multi}, name="replica-a")
    b = ControllerProcess(tmp_path, {"REMEDIATOR_DATABASE_URL": pg_url, **multi}, name="replica-b")
    processes.extend([a, b])
    await a.start()
    await b.start()  # several replicas, each with its own id, run side by side
    same = await asyncio.to_thread(run, "serve", "--port", str(free_port()), env={
        "REMEDIATOR_DATABASE_URL": pg_url, "REMEDIATOR_REPLICA_ID": "replica-a", **multi})
    assert same.returncode == 6 and "REMEDIATOR_REPLICA_ID=replica-a" in same.stderr, same.stderr
    sole = await asyncio.to_thread(run, "serve", "--port", str(free_port()), env={
        "REMEDIATOR_DATABASE_URL": pg_url, "REMEDIATOR_REPLICA_ID": "sole"})
    assert sole.returncode == 6 and "replica-a" in sole.stderr and "replica-b" in sole.stderr, sole.stderr


async def _guard_sessions(pg_url: str, name: str) -> list[int]:
    admin = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=pg_url.rsplit("/", 1)[1])
    try:
        return [int(r["pid"]) for r in await admin.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1", f"remediator {name}")]
    finally:
        await admin.close()


@pytest.mark.postgres
async def test_postgres_controller_takes_its_guard_again_when_the_guard_connection_dies(
    tmp_path: Path, pg_url: str, processes: list[ControllerProcess]
) -> None:
    """A guard connection that dies is the database going away, not another controller: keep running, connect
    again, take the lock again."""
    ctl = ControllerProcess(tmp_path, {"REMEDIATOR_DATABASE_URL": pg_url, "REMEDIATOR_REPLICA_ID": "steady"})
    processes.append(ctl)
    await ctl.start()
    (first,) = await _guard_sessions(pg_url, "steady")
    admin = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=pg_url.rsplit("/", 1)[1])
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)
    finally:
        await admin.close()

    async def taken_again() -> bool:
        sessions = await _guard_sessions(pg_url, "steady")
        return len(sessions) == 1 and sessions[0] != first

    await wait_until(taken_again, 30, "the guard to be taken again on a new connection")
    async with httpx.AsyncClient() as client:

        async def ready() -> bool:
            return (await client.get(f"{ctl.url}/readyz")).status_code == 200

        await wait_until(ready, 10, "/readyz to answer 200 again")
    assert ctl.proc is not None and ctl.proc.poll() is None
    assert "the single-replica guard is held again" in ctl.output()
    assert "lost the single-replica guard" not in ctl.output()


@pytest.mark.postgres
async def test_postgres_controller_stops_when_another_controller_took_its_guard(
    tmp_path: Path, pg_url: str, processes: list[ControllerProcess]
) -> None:
    """The guard connection died and another session took the lock before this controller could take it again:
    another controller runs on the database now, so this one stops (exit 7) instead of acting beside it."""
    ctl = ControllerProcess(tmp_path, {"REMEDIATOR_DATABASE_URL": pg_url, "REMEDIATOR_REPLICA_ID": "doomed"})
    processes.append(ctl)
    await ctl.start()
    (pid,) = await _guard_sessions(pg_url, "doomed")
    usurper = await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=pg_url.rsplit("/", 1)[1],
                                    server_settings={"application_name": "remediator usurper"})
    try:
        # One round trip: the lock request queues at once and is granted as the terminated session ends.
        await usurper.execute(f"SELECT pg_terminate_backend({pid}); SELECT pg_advisory_lock({GUARD_KEY})")
        assert ctl.proc is not None
        code = await asyncio.wait_for(asyncio.to_thread(ctl.proc.wait), timeout=60)
    finally:
        await usurper.close()
    assert code == 7
    assert "lost the single-replica guard" in ctl.output()
    assert "another controller took over" in ctl.output() and "usurper" in ctl.output()
    restarted = ControllerProcess(tmp_path, {"REMEDIATOR_DATABASE_URL": pg_url, "REMEDIATOR_REPLICA_ID": "doomed"},
                                  name="restarted")
    processes.append(restarted)
    await restarted.start()  # the lock went with the sessions: a restart is admitted at once

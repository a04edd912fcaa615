"""Two controller processes on one PostgreSQL database and one fake API server.

Storm: 500 alerts for 200 nodes with MAX_QUARANTINED_NODES=20: the fake server's write history never shows
more than 20 nodes quarantined at once, and no step ran twice. Kill -9 of one replica mid-drain: the other
finishes that remediation without repeating a step.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from remediator.store.db import make_engine, make_sessionmaker
from remediator.store.models import Remediation, StepRow
from tests.controller_process import ControllerProcess
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels

TOKEN = "replica-token"
TAINT = "remediator.io/gpu-unhealthy"
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]


def quarantined(node: dict[str, Any]) -> bool:
    spec = node.get("spec") or {}
    return bool(spec.get("unschedulable")) or any(t.get("key") == TAINT for t in spec.get("taints") or [])


async def wait_until(predicate: Callable[[], Any], timeout: float, what: str, detail: object = None) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not await predicate():
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}: {detail}") from None


@pytest.fixture
async def replicas(
    tmp_path: Path, pg_url: str
) -> AsyncIterator[Callable[..., Any]]:
    started: list[ControllerProcess] = []

    async def start(fake: FakeKube, n: int, **env: str) -> list[ControllerProcess]:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake.url)
        base = {
            "REMEDIATOR_DATABASE_URL": pg_url,
            "REMEDIATOR_KUBECONFIG": str(kubeconfig),
            "REMEDIATOR_WEBHOOK_TOKEN": TOKEN,
            "REMEDIATOR_LEASE_DURATION": "2s",
            "REMEDIATOR_WORKER_POLL_INTERVAL": "100ms",
            "REMEDIATOR_QUARANTINE_RATE": "100000",
            "REMEDIATOR_KUBE_QPS": "500",
            "REMEDIATOR_ALLOW_MULTIPLE_REPLICAS": "true",
            **env,
        }
        procs = [ControllerProcess(tmp_path, base, name=f"replica-{i}-{len(started)}") for i in range(n)]
        for p in procs:
            await p.start()
        started.extend(procs)
        return procs

    yield start
    for p in started:
        await p.stop()


async def _db_rows(pg_url: str) -> tuple[list[Remediation], list[StepRow]]:
    engine = make_engine(pg_url)
    try:
        async with make_sessionmaker(engine)() as session:
            rems = list((await session.scalars(select(Remediation))).all())
            steps = list((await session.scalars(select(StepRow))).all())
            return rems, steps
    finally:
        await engine.dispose()


def _cluster(fake: FakeKube, nodes: int) -> None:
    for i in range(nodes):
        name = f"gpu-{i:03d}"
        fake.add_node(name, labels={"nvidia.com/gpu.present": "true"})
        fake.add_pod(f"job-{i:03d}", "ml", node=name, gpus=8)


async def test_storm_never_overshoots_the_quarantine_limit(
    replicas: Callable[..., Any], pg_url: str
) -> None:
    async with FakeKube() as fake:
        fake.add_namespace("ml")
        _cluster(fake, 200)
        a, b = await replicas(fake, 2, REMEDIATOR_MAX_QUARANTINED_NODES="20")
        rng = random.Random(7)
        alerts = [
            am_alert(xid_labels(f"gpu-{rng.randrange(200):03d}", 79, gpu=str(i % 8), uuid=f"GPU-{i:08d}"))
            for i in range(300)
        ] + [am_alert(xid_labels(f"gpu-{n:03d}", 79, gpu="9", uuid=f"GPU-x{n:07d}")) for n in range(200)]
        rng.shuffle(alerts)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
            posts = [
                client.post(f"{(a if i % 2 else b).url}/api/v1/alerts", json=am_payload(*alerts[i : i + 10]))
                for i in range(0, len(alerts), 10)
            ]
            answers = await asyncio.gather(*posts)
            assert {r.status_code for r in answers} == {200}

            seen: dict[str, int] = {}

            async def settled() -> bool:
                rems, _ = await _db_rows(pg_url)
                seen.clear()
                for r in rems:
                    key = f"{r.state}:{(r.state_reason or '')[:40]}"
                    seen[key] = seen.get(key, 0) + 1
                return len(rems) == 200 and all(r.state in ("succeeded", "held") for r in rems) and sum(
                    r.state == "succeeded" for r in rems
                ) == 20

            await wait_until(settled, 150, "20 quarantines and 180 held remediations", seen)
            guardrails = (await client.get(f"{a.url}/api/v1/guardrails")).json()

        assert fake.max_at_once("nodes", quarantined) == 20
        evicted = fake.evicted_uids()
        assert len(evicted) == len(set(evicted)) == 20
        rems, steps = await _db_rows(pg_url)
        assert sum(r.state == "held" for r in rems) == 180
        assert all((r.state_reason or "").startswith("circuit breaker") for r in rems if r.state == "held")
        assert all(s.attempts == 1 for s in steps), [(s.remediation_id, s.name, s.attempts) for s in steps]
        assert {r.lease_owner for r in rems if r.state == "succeeded"} == {None}
        owners = {e for e in (a.output() + b.output()).splitlines() if "PLAN-ONLY" in e}
        assert not owners, "replicas must act, not plan"
        assert guardrails["circuit_breaker"]["tripped"] is True
        assert guardrails["circuit_breaker"]["quarantined"] == 20 and len(guardrails["held"]) == 180


async def test_kill_9_mid_drain_the_other_replica_finishes(
    replicas: Callable[..., Any], pg_url: str
) -> None:
    async with FakeKube() as fake:
        fake.add_namespace("ml")
        fake.add_node("gpu-1", labels={"nvidia.com/gpu.present": "true"})
        fake.add_pod("trainer-1", "ml", node="gpu-1", gpus=4, labels={"app": "t"})
        fake.add_pod("trainer-2", "ml", node="gpu-1", gpus=4, labels={"app": "t", "protected": "yes"})
        fake.add_pdb("hold", "ml", match_labels={"protected": "yes"}, min_available=1)
        (victim,) = await replicas(fake, 1)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
            r = await client.post(f"{victim.url}/api/v1/alerts", json=am_payload(am_alert(xid_labels("gpu-1", 79))))
            assert r.status_code == 200

            async def drain_blocked() -> bool:
                return len(fake.evicted_uids()) == 1 and any(c.verb == "evict" and c.status == 429 for c in fake.calls)

            await wait_until(drain_blocked, 60, "the drain to evict one pod and be blocked by the PDB")
            victim.kill()
            fake.remove("poddisruptionbudgets", "ml", "hold")
            (survivor,) = await replicas(fake, 1)

            async def finished() -> bool:
                rems, _ = await _db_rows(pg_url)
                return bool(rems) and rems[0].state == "succeeded"

            await wait_until(finished, 60, "the surviving replica to finish the remediation")
            rem_id = (await _db_rows(pg_url))[0][0].id
            audit = (await client.get(f"{survivor.url}/api/v1/audit?remediation={rem_id}")).json()

        evicted = fake.evicted_uids()
        assert len(evicted) == len(set(evicted)) == 2
        _, steps = await _db_rows(pg_url)
        by_name = {s.name: s for s in steps if s.phase == "forward"}
        assert by_name["drain"].attempts == 2  # resumed once, at the drain step
        assert all(s.attempts == 1 for n, s in by_name.items() if n != "drain")
        starts = [(e["data"]["step"], e["data"]["resumed"]) for e in audit if e["kind"] == "step.started"]
        assert [s for s in starts if s[0] == "drain"] == [("drain", False), ("drain", True)]
        others = [s for s in starts if s[0] != "drain"]
        assert len(others) == len({name for name, _ in others}) and not any(resumed for _, resumed in others)
        resumed_at = next(e["id"] for e in audit if e["kind"] == "step.started" and e["data"]["resumed"])
        drained_at = next(e["id"] for e in audit if e["kind"] == "step.succeeded" and e["data"]["step"] == "drain")
        repeated = [e for e in audit if e["kind"] == "kube.patch" and resumed_at < e["id"] < drained_at]
        assert repeated == []  # the resumed drain found the node cordoned already and wrote nothing again


async def test_second_replica_on_sqlite_is_refused(tmp_path: Path) -> None:
    env = {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'one.db'}"}
    first = ControllerProcess(tmp_path, env, name="sqlite-a")
    second = ControllerProcess(tmp_path, env, name="sqlite-b")
    await first.start()
    try:
        with pytest.raises(RuntimeError, match="SQLite supports one replica"):
            await second.start(timeout=30)
    finally:
        await first.stop()
        await second.stop()


async def test_a_second_replica_on_postgres_needs_the_explicit_setting(tmp_path: Path, pg_url: str) -> None:
    env = {"REMEDIATOR_DATABASE_URL": pg_url}
    first = ControllerProcess(tmp_path, env, name="pg-a")
    second = ControllerProcess(tmp_path, env, name="pg-b")
    await first.start()
    try:
        with pytest.raises(RuntimeError, match="REMEDIATOR_ALLOW_MULTIPLE_REPLICAS=true"):
            await second.start(timeout=30)
    finally:
        await first.stop()
        await second.stop()

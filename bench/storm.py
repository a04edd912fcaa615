"""bench/storm: an Xid storm against 1 and 2 controller replicas on PostgreSQL and one fake API server.

500 alerts for 200 GPU nodes, MAX_QUARANTINED_NODES=20, posted as 50 webhooks of 10 alerts spread over the
replicas with 16 concurrent senders. Reports the time from the first webhook to the last admitted
quarantine (the 20th node tainted on the fake API server) and the webhook latency during the storm.
Needs the PostgreSQL server at 127.0.0.1:5432 (trust auth). Usage: python bench/storm.py
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/storm.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
import httpx

from bench._machine import describe
from tests.controller_process import ControllerProcess
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels

TOKEN = "storm-token"
TAINT = "remediator.io/gpu-unhealthy"


async def _admin(statement: str) -> None:
    admin = await asyncpg.connect(host="127.0.0.1", user="postgres", database="test")
    try:
        await admin.execute(statement)
    finally:
        await admin.close()


async def _database() -> tuple[str, str]:
    name = f"storm_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}"')
    return name, f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"


def _tainted(fake: FakeKube) -> int:
    return sum(
        any(t.get("key") == TAINT for t in (n.get("spec") or {}).get("taints") or []) for n in fake.items("nodes")
    )


async def storm(replicas: int) -> dict[str, Any]:
    name, url = await _database()
    try:
        return await _storm(replicas, url)
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _storm(replicas: int, url: str) -> dict[str, Any]:
    async with FakeKube() as fake:
        fake.add_namespace("ml")
        for i in range(200):
            fake.add_node(f"gpu-{i:03d}", labels={"nvidia.com/gpu.present": "true"})
            fake.add_pod(f"job-{i:03d}", "ml", node=f"gpu-{i:03d}", gpus=8)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            env = {
                "REMEDIATOR_DATABASE_URL": url, "REMEDIATOR_WEBHOOK_TOKEN": TOKEN,
                "REMEDIATOR_KUBECONFIG": str(write_kubeconfig(work / "kubeconfig", fake.url)),
                "REMEDIATOR_MAX_QUARANTINED_NODES": "20", "REMEDIATOR_QUARANTINE_RATE": "100000",
                "REMEDIATOR_WORKER_POLL_INTERVAL": "100ms", "REMEDIATOR_KUBE_QPS": "500",
                "REMEDIATOR_LOG_LEVEL": "WARNING", "REMEDIATOR_ALLOW_MULTIPLE_REPLICAS": "true",
            }
            procs = [ControllerProcess(work, env, name=f"storm-{replicas}-{i}") for i in range(replicas)]
            for p in procs:
                await p.start()
            try:
                rng = random.Random(1)
                alerts = [
                    am_alert(xid_labels(f"gpu-{rng.randrange(200):03d}", 79, gpu=str(i % 8), uuid=f"GPU-{i:08d}"))
                    for i in range(500)
                ]
                bodies = [am_payload(*alerts[i : i + 10]) for i in range(0, 500, 10)]
                latencies: list[float] = []
                sem = asyncio.Semaphore(16)
                async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:

                    async def send(i: int, body: dict[str, Any]) -> None:
                        async with sem:
                            t = time.perf_counter()
                            r = await client.post(f"{procs[i % replicas].url}/api/v1/alerts", json=body)
                            latencies.append(time.perf_counter() - t)
                            r.raise_for_status()

                    started = time.perf_counter()
                    await asyncio.gather(*(send(i, b) for i, b in enumerate(bodies)))
                    async with asyncio.timeout(300):
                        while _tainted(fake) < 20:
                            await asyncio.sleep(0.02)
                    admitted = time.perf_counter() - started
                overshoot = fake.max_at_once("nodes", lambda n: any(
                    t.get("key") == TAINT for t in (n.get("spec") or {}).get("taints") or []))
            finally:
                for p in procs:
                    await p.stop()
    latencies.sort()
    return {
        "replicas": replicas, "admitted_s": admitted, "max_tainted": overshoot,
        "p50_ms": statistics.median(latencies) * 1000, "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


async def main() -> None:
    # Xid 79 -> reboot-node, which taints first: the taint marks an admitted quarantine.
    results = [await storm(1), await storm(2)]
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          "500 alerts / 200 nodes / limit 20, PostgreSQL 127.0.0.1")
    print("| replicas | first webhook -> 20th quarantine s | webhook p50 ms | webhook p99 ms | max nodes tainted |")
    print("|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['replicas']} | {r['admitted_s']:.2f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
            f"| {r['max_tainted']} |"
        )


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()
    asyncio.run(main())

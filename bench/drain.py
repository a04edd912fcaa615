"""bench/drain: one node with 110 GPU pods drained through the strict fake API server over real HTTP.

Measures the `drain` action end to end (cordon, list, evictions at REMEDIATOR_EVICTION_QPS, waiting until
every pod is gone) and, in the same run, the floor: 110 bare eviction calls issued back to back through
the same adapter. The fake's grace-period clock runs at 1/100 of real time (30 s grace -> 0.3 s).
Usage: python bench/drain.py [--pods 110] [--qps 50] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/drain.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import describe
from remediator.actions.base import ActionContext, Target
from remediator.actions.drain import Drain, DrainParams
from remediator.adapters.kube import KubeAdapter
from remediator.settings import Settings
from tests.fakekube.server import FakeKube


def _populate(fake: FakeKube, pods: int) -> None:
    fake.add_namespace("ml")
    fake.add_node("gpu-1", labels={"nvidia.com/gpu.present": "true"})
    for i in range(pods):
        fake.add_pod(f"p-{i:03d}", "ml", node="gpu-1", gpus=1)


async def drain_once(pods: int, qps: float) -> float:
    async with FakeKube() as fake:
        _populate(fake, pods)
        kube = KubeAdapter.for_host(fake.url, qps=1000)
        settings = Settings(eviction_qps=qps, database_url="sqlite+aiosqlite:///:memory:")
        ctx = ActionContext(remediation_id="bench", step_name="drain", target=Target(kind="node", node="gpu-1"),
                            settings=settings, dry_run=False, kube=kube, timeout=600)
        params = DrainParams.model_validate({"pods": "all", "timeout": "10m"})
        started = time.perf_counter()
        await Drain(poll_interval=0.05).run(ctx, params)
        elapsed = time.perf_counter() - started
        assert fake.pods("ml") == [], "drain left pods behind"
        await kube.close()
        return elapsed


async def floor_once(pods: int) -> float:
    async with FakeKube() as fake:
        _populate(fake, pods)
        kube = KubeAdapter.for_host(fake.url, qps=100000)
        started = time.perf_counter()
        for i in range(pods):
            await kube.evict_pod("ml", f"p-{i:03d}")
        elapsed = time.perf_counter() - started
        await kube.close()
        return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--qps", type=float, default=50.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    drains = [await drain_once(args.pods, args.qps) for _ in range(args.runs)]
    floors = [await floor_once(args.pods) for _ in range(args.runs)]
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          f"{args.pods} pods, eviction_qps={args.qps:g}, {args.runs} runs")
    print("| measurement | median s | min s | max s |")
    print("|---|---|---|---|")
    print(f"| drain action: cordon, evict all, wait until gone | {statistics.median(drains):.2f} | "
          f"{min(drains):.2f} | {max(drains):.2f} |")
    print(f"| floor: {args.pods} bare eviction calls, back to back | {statistics.median(floors):.2f} | "
          f"{min(floors):.2f} | {max(floors):.2f} |")


if __name__ == "__main__":
    asyncio.run(main())

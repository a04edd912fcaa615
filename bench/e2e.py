"""bench/e2e: from a GPU metric change to the taint on the (fake) API server, next to a bare receiver.

The end-to-end stack of tests/e2e (dcgm-style exporter, Prometheus scraping and evaluating every 1 s with the
shipped rules, `for:` shortened, Alertmanager with group_wait 0, `remediator serve`, the fake API server on
127.0.0.1). Alertmanager routes every alert both to the controller and to a bare webhook receiver, so each
run measures, from the same metric change:
  - webhook: the alert's arrival at the bare receiver (what Prometheus and Alertmanager alone cost),
  - taint: the write that puts the remediator.io/gpu-unhealthy taint on the node reaching the API server,
and their difference (what the controller adds: webhook, durable commit, worker, rule, playbook, API call).
Each run uses its own node (guardrails such as cooldowns and repeat offenders stay out of the way), waits
for the quarantine to finish, then resolves the alert and waits for the controller to record that, so runs
never overlap.

Usage: python -m bench.e2e [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/e2e.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import describe
from tests.e2e.stack import Stack, eventually
from tests.fakekube.server import Call

TAINT_KEY = "remediator.io/gpu-unhealthy"
XID = "DCGM_FI_DEV_XID_ERRORS"


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def node_name(i: int) -> str:
    return f"bench-{i:02d}"


def add_node(stack: Stack, i: int) -> None:
    name = node_name(i)
    stack.fake.add_node(name, ip=f"127.0.0.{20 + i}", labels={"nvidia.com/gpu.present": "true"})
    stack.fake.add_pod(f"{name}-job", "ml", node=name, gpus=1)
    stack.exporter.add_gpu(name, 0, f"GPU-bench000-0000-4000-8000-{i:012x}", pod=f"{name}-job", namespace="ml",
                           container="main")


class TaintWrites:
    """When the fake API server received each node's first taint write (time.monotonic()).

    Recorded by the server as the request comes in, so the benchmark needs no tight polling loop competing
    with the controller for the CPU.
    """

    def __init__(self, stack: Stack) -> None:
        self.at: dict[str, float] = {}
        stack.fake.before("patch", "nodes", self._seen, times=1_000_000)

    def _seen(self, call: Call) -> None:
        if call.name and call.name not in self.at and TAINT_KEY in json.dumps(call.body):
            self.at[call.name] = time.monotonic()


def monotonic_of(iso_utc: str) -> float:
    """A naive-UTC ISO timestamp from the controller on the same machine, on this process's monotonic clock."""
    wall = datetime.fromisoformat(iso_utc).replace(tzinfo=UTC).timestamp()
    return time.monotonic() - (time.time() - wall)


async def one_run(stack: Stack, writes: TaintWrites, i: int) -> tuple[float, float, float]:
    """Seconds from the metric change to the bare webhook, to the stored remediation and to the taint."""
    node = node_name(i)
    await asyncio.sleep(random.uniform(0, 1))  # a different phase against the 1 s scrape each run
    changed = stack.exporter.set(node, 0, XID, 79)
    await eventually(lambda: any(t["key"] == TAINT_KEY for t in stack.taints(node)), timeout=30,
                     what=f"taint on {node}")
    taint_at = writes.at[node]
    arrival = await eventually(lambda: stack.bare.first(since=changed, Hostname=node), timeout=30,
                               what=f"the webhook for {node} at the bare receiver")
    rem = await stack.remediation_in(node, {"succeeded"})
    created = monotonic_of(rem["created_at"])
    stack.exporter.set(node, 0, XID, 0)

    async def resolved() -> bool:
        return bool((await stack.remediation(rem["id"]))["alert_resolved"])

    await eventually(resolved, timeout=30, what=f"the resolved alert of {node}")
    return arrival.at - changed, created - changed, taint_at - changed


async def bench(runs: int, workdir: Path) -> list[tuple[float, float, float]]:
    stack = Stack(workdir, controller_env={
        "REMEDIATOR_LOG_LEVEL": "WARNING",
        "REMEDIATOR_MAX_QUARANTINED_NODES": "1000",
        "REMEDIATOR_QUARANTINE_RATE": "1000",
    })
    try:
        await stack.start()
        writes = TaintWrites(stack)
        for i in range(runs + 1):
            add_node(stack, i)
        await stack.exporter.scraped(2)
        await one_run(stack, writes, runs)  # warm-up, not counted
        return [await one_run(stack, writes, i) for i in range(runs)]
    finally:
        await stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        results = asyncio.run(bench(args.runs, Path(tmp)))
    load_after = os.getloadavg()[0]
    webhook = [w * 1000 for w, _, _ in results]
    stored = [(c - w) * 1000 for w, c, _ in results]
    taint = [t * 1000 for _, _, t in results]
    added = [(t - w) * 1000 for w, _, t in results]
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          f"load average {load_before:.1f} before, {load_after:.1f} after; {args.runs} runs; "
          "scrape and evaluation every 1 s, group_wait 0")
    print("| from | to | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for start, end, values in (
        ("metric change", "webhook at a bare receiver (Prometheus + Alertmanager)", webhook),
        ("metric change", "taint on the API server (whole chain)", taint),
        ("bare webhook", "taint: what the controller adds", added),
        ("bare webhook", "remediation stored (webhook, commit, worker, rule match)", stored),
    ):
        cells = " | ".join(f"{percentile(values, p):.0f}" for p in (50, 90, 99, 100))
        print(f"| {start} | {end} | {cells} |")
    print(f"controller adds {percentile(added, 99):.0f} ms at p99 (target < 100 ms)")


if __name__ == "__main__":
    main()

"""bench/fleet_latency: what the controller adds between a webhook and the taint, in a small and a fleet-sized cluster.

bench/e2e.py measures this behind real Prometheus and Alertmanager with a handful of nodes; here the webhook
is posted directly (what Alertmanager does) so that only the controller's part is timed: from sending one
Xid 79 alert to the taint patch for its node reaching the strict fake API server (recorded by the server as
the request comes in). Two clusters in the same run, same node and pod shapes (bench/fleet.py's builder:
~19 KB nodes, pods owned by ReplicaSets of Deployments, 8 GPU pods per node):

- `small` (the baseline): --runs + 1 nodes;
- `fleet`: --nodes nodes and --pods pods.

One `remediator serve` process (SQLite) per cluster; each run alerts a node of its own (its pods have no
PodDisruptionBudget, so the drain finishes) and waits for the remediation to finish before the next, so
runs never overlap. Also reported: the fake server's own time answering the reads of the admission path
(what a real API server's caches would answer in about a millisecond), per run.
Usage: python bench/fleet_latency.py [--nodes 10000] [--pods 80000] [--runs 20] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/fleet_latency.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench._machine import describe
from bench.fleet import NAMESPACES, PODS_PER_APP, fleet_objects
from tests.controller_process import ControllerProcess
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.fakekube.server import Call, FakeKube
from tests.helpers import am_alert, am_payload, xid_labels

TOKEN = "fleet-latency-token"
TAINT = "remediator.io/gpu-unhealthy"


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def nodes_without_budgets(nodes: int, pods: int) -> list[int]:
    """Nodes none of whose pods is covered by a PodDisruptionBudget (bench/fleet.py: one per 10 apps)."""
    covered = {(i * 7919) % nodes for i in range(pods) if (i // PODS_PER_APP) % 10 == 0}
    return [n for n in range(nodes) if n not in covered]


class Timings:
    """When each node's first taint patch arrived, and how long the fake took to answer each request."""

    def __init__(self, fake: FakeKube) -> None:
        self.taint_at: dict[str, float] = {}
        self.served: list[tuple[float, str, float]] = []  # (arrival, "verb plural", seconds)
        fake.before("patch", "nodes", self._patch, times=1_000_000)
        dispatch = fake._dispatch

        def timed(*args: Any) -> Any:
            t = time.monotonic()
            try:
                return dispatch(*args)
            finally:
                call: Call = args[3]
                self.served.append((t, f"{call.verb} {call.plural}", time.monotonic() - t))

        fake._dispatch = timed  # type: ignore[method-assign]

    def _patch(self, call: Call) -> None:
        if call.name and call.name not in self.taint_at and TAINT in json.dumps(call.body):
            self.taint_at[call.name] = time.monotonic()


async def measure(label: str, nodes: int, pods: int, runs: int, work: Path) -> dict[str, Any]:
    async with FakeKube() as fake:
        for ns in range(NAMESPACES):
            fake.add_namespace(f"ml-{ns}")
        fake.load(fleet_objects(nodes, pods, owners=True))
        timings = Timings(fake)
        env = {
            "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{work / f'{label}.db'}",
            "REMEDIATOR_WEBHOOK_TOKEN": TOKEN, "REMEDIATOR_LOG_LEVEL": "WARNING",
            "REMEDIATOR_KUBECONFIG": str(write_kubeconfig(work / f"kubeconfig-{label}", fake.url)),
            "REMEDIATOR_MAX_QUARANTINED_NODES": "1000", "REMEDIATOR_QUARANTINE_RATE": "1000",
            "REMEDIATOR_WORKER_POLL_INTERVAL": "100ms",
            "REMEDIATOR_WORKER_PROCESS": "false",  # one process, as the recorded figures were measured
        }
        proc = ControllerProcess(work, env, name=f"latency-{label}")
        await proc.start(timeout=600)
        targets = nodes_without_budgets(nodes, pods)[: runs + 1]
        added: list[float] = []
        fake_ms: list[float] = []
        per_verb: dict[str, list[float]] = defaultdict(list)
        try:
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as client:
                for i, index in enumerate(targets):
                    node = f"gpu-{index:05d}"
                    body = am_payload(am_alert(xid_labels(node, 79, gpu="0", uuid=f"GPU-{index:08d}")))
                    sent = time.monotonic()
                    (await client.post(f"{proc.url}/api/v1/alerts", json=body)).raise_for_status()
                    async with asyncio.timeout(60):
                        while node not in timings.taint_at:
                            await asyncio.sleep(0.01)
                    taint_at = timings.taint_at[node]
                    async with asyncio.timeout(120):
                        while not [r for r in (await client.get(f"{proc.url}/api/v1/remediations",
                                                                params={"node": node})).json()
                                   if r["state"] in ("succeeded", "failed")]:
                            await asyncio.sleep(0.1)
                    if i == 0:
                        continue  # warm-up, not counted
                    added.append((taint_at - sent) * 1000)
                    window = [(kind, s) for at, kind, s in timings.served if sent <= at < taint_at]
                    fake_ms.append(sum(s for _, s in window) * 1000)
                    by_kind: dict[str, float] = defaultdict(float)
                    for kind, s in window:
                        by_kind[kind] += s * 1000
                    for kind, ms in by_kind.items():
                        per_verb[kind].append(ms)
        finally:
            await proc.stop()
        return {"label": label, "nodes": nodes, "pods": pods, "added": added, "fake": fake_ms,
                "per_verb": {k: sorted(v)[len(v) // 2] for k, v in sorted(per_verb.items())}}


def report(args: argparse.Namespace, results: list[dict[str, Any]], load: tuple[float, float]) -> None:
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          f"load average {load[0]:.1f} before, {load[1]:.1f} after; {args.runs} runs each")
    print("| cluster | nodes / pods | webhook -> taint p50 ms | p90 ms | p99 ms | max ms "
          "| of which the fake server answering, p50 ms | fake's median per run by request, ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        cells = " | ".join(f"{percentile(r['added'], p):.0f}" for p in (50, 90, 99, 100))
        verbs = ", ".join(f"{k} {v:.1f}" for k, v in r["per_verb"].items())
        print(f"| {r['label']} | {r['nodes']} / {r['pods']} | {cells} | {percentile(r['fake'], 50):.1f} | {verbs} |")


async def main(args: argparse.Namespace) -> None:
    before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        small_nodes = max(args.runs + 1, 4) * 4
        results = [
            await measure("small", small_nodes, small_nodes * PODS_PER_APP, args.runs, work),
            await measure("fleet", args.nodes, args.pods, args.runs, work),
        ]
    report(args, results, (before, os.getloadavg()[0]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=80_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workdir", help="keep the controllers' logs and databases here")
    parser.add_argument("--smoke", action="store_true", help="a 400-node fleet, 3 runs")
    parsed = parser.parse_args()
    if parsed.smoke:
        parsed.nodes, parsed.pods, parsed.runs = 400, 3200, 3
    asyncio.run(main(parsed))

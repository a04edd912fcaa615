"""bench/fleet_storm: an Xid storm at fleet size against several replicas on PostgreSQL, up to the breaker.

The strict fake API server holds --nodes realistic GPU nodes and --pods pods owned by ReplicaSets of
Deployments (bench/fleet.py's builder). --alerts Xid 79 alerts for --alert-nodes of those nodes (every one at
least once) are posted as webhooks of 10 alerts, paced evenly over --seconds and spread over --replicas
`remediator serve` processes sharing one fresh PostgreSQL database (127.0.0.1:5432, trust auth), with
MAX_QUARANTINED_NODES=--limit (a percent of the GPU nodes the inventory counts). Every node write on the fake
is followed as it is stored, so the count of tainted nodes is known at every moment. Reported:

- time from the first webhook to the breaker (the limit's worth of nodes tainted) and nodes quarantined per
  second up to it; webhook latency p50/p99; the most nodes tainted at once over the whole run;
- pods evicted twice (must be 0);
- room freed: --free quarantined nodes whose remediation finished are rebooted and reverted through the API;
  the held remediations that start then must be the oldest held ones, in the order they were held.

The node sidecar's validation gate is replaced by a passing stand-in in the controllers (no sidecar runs).
Usage: python bench/fleet_storm.py [--nodes 10000] [--pods 80000] [--alerts 5000] [--alert-nodes 2000]
       [--seconds 10] [--replicas 3] [--concurrency 16] [--limit 5%] [--free 50] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/fleet_storm.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench._machine import describe
from bench.fleet import NAMESPACES, fleet_objects
from bench.storm import _admin, _database
from tests.controller_process import ControllerProcess
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels

TOKEN = "fleet-storm-token"
TAINT = "remediator.io/gpu-unhealthy"
PRELUDE = (
    "import sys; sys.argv[0] = 'remediator'; import bench.fleet_storm as f; f.pass_validation(); "
    "from remediator.cli.main import main; main()"
)


def pass_validation() -> None:
    """The return gate's GPU validation passes (the benchmark runs no node sidecar to validate on)."""
    from remediator.actions.base import ActionResult
    from remediator.actions.validation import ValidateGpu

    async def run(self: ValidateGpu, ctx: Any, params: Any) -> ActionResult:
        return ActionResult(changed=False, message="validated (benchmark stand-in)",
                            output={"verdict": "pass", "failed": {}, "gpus": []})

    ValidateGpu.run = run  # type: ignore[method-assign]


def tainted(node: Mapping[str, Any] | None) -> bool:
    return node is not None and any(t.get("key") == TAINT for t in (node.get("spec") or {}).get("taints") or [])


class TaintLog:
    """Follows every node write as the fake stores it: how many nodes are tainted, and since when."""

    def __init__(self, fake: FakeKube) -> None:
        self.fake = fake
        self.seen = len(fake.store.changes)
        self.state: dict[str, bool] = {}
        self.count = 0
        self.most = 0
        self.first_taint: dict[str, float] = {}  # node -> monotonic time of its first taint
        self.reached: dict[int, float] = {}  # count -> monotonic time it was first reached
        fake.store.listeners.append(self._changed)

    def _changed(self) -> None:
        now = time.monotonic()
        changes = self.fake.store.changes
        for change in changes[self.seen:]:
            if change.plural != "nodes":
                continue
            now_tainted = tainted(change.object)
            was = self.state.get(change.name, False)
            if now_tainted != was:
                self.state[change.name] = now_tainted
                self.count += 1 if now_tainted else -1
                self.most = max(self.most, self.count)
                self.reached.setdefault(self.count, now)
                if now_tainted:
                    self.first_taint.setdefault(change.name, now)
        self.seen = len(changes)


async def request(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> httpx.Response:
    """One API call, sent again when the server closed the kept-alive connection just as it was reused."""
    for attempt in range(3):
        try:
            response = await client.request(method, url, **kwargs)
            response.raise_for_status()
            return response
        except httpx.TransportError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def remediations(client: httpx.AsyncClient, url: str, state: str | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while True:
        params: dict[str, Any] = {"limit": 1000, "offset": len(rows)}
        if state:
            params["state"] = state
        page = (await request(client, "GET", f"{url}/api/v1/remediations", params=params)).json()
        rows += page
        if len(page) < 1000:
            return rows


def limit_nodes(limit: str, gpu_nodes: int) -> int:
    return int(gpu_nodes * float(limit[:-1]) / 100) if limit.endswith("%") else int(limit)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    name, url = await _database()
    try:
        return await _run(args, url)
    finally:
        await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    limit = limit_nodes(args.limit, args.nodes)
    result: dict[str, Any] = {"limit": limit}
    # ReplicaSets replace evicted pods at once and the replacements run Ready on a node no alert names (the
    # scheduler's part), so PodDisruptionBudgets let drains go on, as in a cluster with spare capacity.
    async with FakeKube(controllers=True) as fake:
        fake.replacement_node = f"gpu-{args.nodes - 1:05d}"
        for ns in range(NAMESPACES):
            fake.add_namespace(f"ml-{ns}")
        fake.load(fleet_objects(args.nodes, args.pods, owners=True))
        log = TaintLog(fake)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(args.workdir or tmp)
            work.mkdir(parents=True, exist_ok=True)
            env = {
                "REMEDIATOR_DATABASE_URL": url, "REMEDIATOR_WEBHOOK_TOKEN": TOKEN,
                "REMEDIATOR_KUBECONFIG": str(write_kubeconfig(work / "kubeconfig", fake.url)),
                "REMEDIATOR_MAX_QUARANTINED_NODES": args.limit, "REMEDIATOR_QUARANTINE_RATE": "1000000",
                "REMEDIATOR_WORKER_POLL_INTERVAL": "100ms", "REMEDIATOR_KUBE_QPS": "500",
                "REMEDIATOR_EVICTION_QPS": "100", "REMEDIATOR_LOG_LEVEL": "WARNING",
                "REMEDIATOR_ALLOW_MULTIPLE_REPLICAS": "true", "REMEDIATOR_WORKER_CONCURRENCY": str(args.concurrency),
            }
            procs = [ControllerProcess(work, env, name=f"fleet-storm-{i}", python_args=("-c", PRELUDE))
                     for i in range(args.replicas)]
            started = time.perf_counter()
            try:
                await asyncio.gather(*(p.start(timeout=600) for p in procs))
                result["ready_s"] = time.perf_counter() - started
                async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as client:
                    await storm(args, fake, log, procs, client, result)
                    print(f"storm phase: {result}", flush=True)  # kept even if freeing room goes wrong
                    await free_room(args, fake, log, procs, client, result)
            finally:
                await asyncio.gather(*(p.stop() for p in procs))
        uids = fake.evicted_uids()
        result["evictions"] = len(uids)
        result["evicted_twice"] = len(uids) - len(set(uids))
        result["most_tainted"] = log.most
    return result


async def storm(
    args: argparse.Namespace, fake: FakeKube, log: TaintLog, procs: list[ControllerProcess],
    client: httpx.AsyncClient, result: dict[str, Any],
) -> None:
    rng = random.Random(1)
    targets = rng.sample(range(args.nodes - 1), args.alert_nodes)  # the last node takes the replacements
    on = targets + [rng.choice(targets) for _ in range(args.alerts - len(targets))]
    rng.shuffle(on)
    alerts = [am_alert(xid_labels(f"gpu-{n:05d}", 79, gpu=str(i % 8), uuid=f"GPU-{i:08d}"))
              for i, n in enumerate(on)]
    bodies = [am_payload(*alerts[i : i + 10]) for i in range(0, len(alerts), 10)]
    latencies: list[float] = []
    sem = asyncio.Semaphore(32)
    start = time.monotonic()
    gap = args.seconds / len(bodies)

    async def send(i: int, body: dict[str, Any]) -> None:
        await asyncio.sleep(max(0.0, start + i * gap - time.monotonic()))
        async with sem:
            t = time.perf_counter()
            r = await client.post(f"{procs[i % len(procs)].url}/api/v1/alerts", json=body)
            latencies.append(time.perf_counter() - t)
            r.raise_for_status()

    await asyncio.gather(*(send(i, b) for i, b in enumerate(bodies)))
    result["sent_s"] = time.monotonic() - start
    limit = result["limit"]
    async with asyncio.timeout(args.wait):
        while limit not in log.reached:
            await asyncio.sleep(0.05)
    result["breaker_s"] = log.reached[limit] - start
    result["first_taint_s"] = log.reached[1] - start
    latencies.sort()
    result["p50_ms"] = statistics.median(latencies) * 1000
    result["p99_ms"] = latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000
    result["webhooks"] = len(bodies)
    # Every node's remediation decided: admitted (up to the limit) or held by the breaker.
    expect_held = args.alert_nodes - limit
    async with asyncio.timeout(args.wait):
        while True:
            held = await remediations(client, procs[0].url, "held")
            pending = await remediations(client, procs[0].url, "pending")
            if len(held) >= expect_held and not pending:
                break
            await asyncio.sleep(2.0)
    result["all_decided_s"] = time.monotonic() - start
    result["held"] = len(held)


async def free_room(
    args: argparse.Namespace, fake: FakeKube, log: TaintLog, procs: list[ControllerProcess],
    client: httpx.AsyncClient, result: dict[str, Any],
) -> None:
    """Revert --free finished quarantines (after rebooting their nodes); the oldest held must start, in order."""
    async with asyncio.timeout(args.wait):
        while len(done := await remediations(client, procs[0].url, "succeeded")) < args.free:
            await asyncio.sleep(1.0)
    held = sorted(await remediations(client, procs[0].url, "held"), key=lambda r: (r["created_at"], r["id"]))
    chosen = done[: args.free]
    for i, rem in enumerate(chosen):
        fake.reboot_node(rem["node"])  # the return gate wants proof of a reboot
        await request(client, "POST", f"{procs[i % len(procs)].url}/api/v1/remediations/{rem['id']}/revert")
    freed_at = time.monotonic()
    held_ids = {r["id"] for r in held}
    async with asyncio.timeout(args.wait):
        while True:
            still = {r["id"] for r in await remediations(client, procs[0].url, "held")}
            if len(held_ids - still) >= args.free:
                break
            await asyncio.sleep(1.0)
    started = [r for r in held if r["id"] not in still]
    oldest = held[: args.free]
    by_start = sorted(started, key=lambda r: log.first_taint.get(r["node"], float("inf")))
    position = {r["id"]: i for i, r in enumerate(held)}
    order = [position[r["id"]] for r in by_start]
    result.update(
        freed=len(chosen), started_after_free=len(started), admitted_s=time.monotonic() - freed_at,
        oldest_started=len({r["id"] for r in oldest} & {r["id"] for r in started}),
        inversions=sum(1 for i in range(len(order)) for j in range(i + 1, len(order)) if order[i] > order[j]),
        pairs=len(order) * (len(order) - 1) // 2, held_positions=order,
    )


def report(args: argparse.Namespace, r: dict[str, Any], load: tuple[float, float]) -> None:
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          f"load average {load[0]:.1f} before, {load[1]:.1f} after; nodes={args.nodes} "
          f"pods={args.pods} alerts={args.alerts} alert-nodes={args.alert_nodes} seconds={args.seconds} "
          f"replicas={args.replicas} concurrency={args.concurrency} limit={args.limit} ({r['limit']} nodes) "
          f"free={args.free}; PostgreSQL 127.0.0.1")
    rate = r["limit"] / r["breaker_s"]
    print("| measurement | value |")
    print("|---|---|")
    rows = [
        ("replicas ready (s)", f"{r['ready_s']:.1f}"),
        (f"{r['webhooks']} webhooks sent (s)", f"{r['sent_s']:.2f}"),
        ("webhook p50 / p99 (ms)", f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f}"),
        ("first webhook -> first taint (s)", f"{r['first_taint_s']:.2f}"),
        (f"first webhook -> breaker, {r['limit']} nodes tainted (s)", f"{r['breaker_s']:.2f}"),
        ("nodes quarantined per second up to the breaker", f"{rate:.1f}"),
        ("every node's remediation admitted or held (s)", f"{r['all_decided_s']:.1f}"),
        ("held by the breaker", str(r["held"])),
        ("most nodes tainted at once (whole run)", f"{r['most_tainted']} (limit {r['limit']})"),
        ("pod evictions / pods evicted twice", f"{r['evictions']} / {r['evicted_twice']}"),
        ("reverted to free room / held started after", f"{r['freed']} / {r['started_after_free']}"),
        ("of those, among the oldest held", f"{r['oldest_started']} of {r['freed']}"),
        ("start order against held order: inversions", f"{r['inversions']} of {r['pairs']} pairs"),
        ("room freed -> held started (s)", f"{r['admitted_s']:.1f}"),
    ]
    for k, v in rows:
        print(f"| {k} | {v} |")
    print(f"held positions in start order: {r['held_positions']}")


async def main(args: argparse.Namespace) -> None:
    before = os.getloadavg()[0]
    result = await run(args)
    report(args, result, (before, os.getloadavg()[0]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000, help="GPU nodes in the fake API server")
    parser.add_argument("--pods", type=int, default=80_000)
    parser.add_argument("--alerts", type=int, default=5_000)
    parser.add_argument("--alert-nodes", type=int, default=2_000, help="distinct nodes the alerts name")
    parser.add_argument("--seconds", type=float, default=10.0, help="the alerts are sent over this long")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--limit", default="5%", help="REMEDIATOR_MAX_QUARANTINED_NODES")
    parser.add_argument("--concurrency", type=int, default=16, help="REMEDIATOR_WORKER_CONCURRENCY per replica")
    parser.add_argument("--free", type=int, default=50, help="quarantines reverted to free room for held ones")
    parser.add_argument("--wait", type=float, default=600.0, help="give up on a phase after this many seconds")
    parser.add_argument("--workdir", help="keep the controllers' logs here")
    parser.add_argument("--smoke", action="store_true",
                        help="200 nodes, 800 pods, 150 alerts on 60 nodes over 2 s, 2 replicas, limit 10%%, free 3")
    parsed = parser.parse_args()
    if parsed.smoke:
        parsed.nodes, parsed.pods, parsed.alerts, parsed.alert_nodes = 200, 800, 150, 60
        parsed.seconds, parsed.replicas, parsed.limit, parsed.free, parsed.wait = 2.0, 2, "10%", 3, 120.0
    asyncio.run(main(parsed))

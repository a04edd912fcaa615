"""bench/fleet: the controller against a fleet-sized cluster, node inventory by watch vs. a list every minute.

The strict fake API server is loaded with --nodes nodes of realistic size (about 50 status.images, five
conditions, ~60 GPU feature-discovery labels nvidia.com/gpu.*, addresses, managedFields: ~15 KB of JSON each)
and --pods pods (8 per node, one PodDisruptionBudget per 10 apps). A kubelet stand-in rewrites each node's
status once per --status-period seconds (nodeStatusReportFrequency, 5 min by default), spread evenly, so a
watch has the changes a real fleet has. Then, in the same run, one `remediator serve` process per mode:

- `list`: the baseline, the inventory as it was before the watch: every node listed every --list-interval
  seconds (60 s), whole (the prelude in `use_polling_inventory` patches the worker);
- `watch`: as shipped (remediator/adapters/node_watch.py): one paged list, then a watch with bookmarks;
- `process` (with --modes): `watch` with REMEDIATOR_WORKER_PROCESS=true; RSS is then both processes'.

Each mode is measured for --seconds at rest (no alerts) and --seconds under load (one webhook of 10 Xid 79
alerts on random nodes every second, MAX_QUARANTINED_NODES=1%): the controller's RSS (end of phase and
peak), its API requests per minute by verb and the bytes per minute it read from the API server (counted by
the fake per response, watch events as they are sent), plus start-up (ready time, bytes).
Usage: python bench/fleet.py [--nodes 10000] [--pods 80000] [--seconds 120] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/fleet.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench._machine import describe
from bench._servers import tree_rss_mb
from tests.controller_process import ControllerProcess
from tests.fakekube import builders
from tests.fakekube.kubeconfig import write_kubeconfig
from tests.fakekube.server import FakeKube
from tests.fakekube.store import resource_type
from tests.helpers import am_alert, am_payload, xid_labels

TOKEN = "fleet-token"
NAMESPACES = 20
PODS_PER_APP = 8

PRELUDE = (
    "import sys; sys.argv[0] = 'remediator'; import bench.fleet as f; f.use_polling_inventory(); "
    "from remediator.cli.main import main; main()"
)


def use_polling_inventory() -> None:
    """The baseline: the worker's inventory as before the watch (all nodes, whole, every BENCH_LIST_INTERVAL s)."""
    from remediator.engine.worker import Worker
    from remediator.errors import RemediatorError
    from remediator.kube.inventory import NodeInventory

    interval = float(os.environ.get("BENCH_LIST_INTERVAL", "60"))

    async def refresh_inventory(self: Worker) -> None:
        if self.rt.kube is None:
            return
        try:
            nodes = await self.rt.kube.list_nodes()
        except RemediatorError:
            return
        inventory = NodeInventory()
        inventory.replace(nodes, "")
        self.rt.gpu_nodes, self.rt.nodes_by_ip = inventory.gpu_nodes, inventory.nodes_by_ip

    async def inventory_loop(self: Worker) -> None:
        while True:
            await asyncio.sleep(interval)
            await refresh_inventory(self)

    Worker.refresh_inventory = refresh_inventory  # type: ignore[method-assign]
    Worker._inventory_loop = inventory_loop  # type: ignore[method-assign]


# ------------------------------------------------------------------ a realistic fleet

def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


IMAGES = [
    {
        "names": [f"registry.example.com/team-{i % 7}/image-{i}@sha256:{_digest(str(i))}",
                  f"registry.example.com/team-{i % 7}/image-{i}:v1.{i}.0-cuda12.4"],
        "sizeBytes": 200_000_000 + i * 7_654_321,
    }
    for i in range(50)
]

GPU_LABELS = {
    "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.machine": "DGX-H100",
    "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.mode": "compute", "nvidia.com/gpu.clique": "a1.b2",
    "nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "127", "nvidia.com/cuda.driver.rev": "05",
    "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "4", "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "single", "nvidia.com/mps.capable": "false", "nvidia.com/gfd.timestamp": "1764720000",
    **{f"nvidia.com/gpu.deploy.{c}": "true" for c in ("container-toolkit", "dcgm", "dcgm-exporter", "device-plugin",
                                                         "driver", "gpu-feature-discovery", "node-status-exporter",
                                                         "operator-validator", "mig-manager", "sandbox-device-plugin")},
    **{f"feature.node.kubernetes.io/cpu-cpuid.{f}": "true" for f in ("AVX", "AVX2", "AVX512F", "AVX512BW", "AMXBF16",
                                                                     "AMXTILE", "FMA3", "SHA", "VAES", "VPCLMULQDQ")},
    **{f"feature.node.kubernetes.io/pci-10de.{k}": "true" for k in ("present", "sriov.capable")},
    **{f"nvidia.com/gpu.{i}.uuid-suffix": f"{i:04x}" for i in range(8)},
    **{f"nvidia.com/gpu.topology.nvlink.{i}": "18" for i in range(8)},
}


def node_object(index: int, now: str) -> dict[str, Any]:
    name = f"gpu-{index:05d}"
    node = builders.node_body(name, f"127.{10 + index // 62500}.{(index // 250) % 250}.{index % 250 + 1}",
                              labels={**GPU_LABELS, "topology.kubernetes.io/zone": f"zone-{index % 4}",
                                      "node.kubernetes.io/instance-type": "p5.48xlarge",
                                      "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"})
    node["metadata"]["annotations"] = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        "csi.volume.kubernetes.io/nodeid": f'{{"ebs.csi.aws.com":"i-{_digest(name)[:17]}"}}',
        "nfd.node.kubernetes.io/feature-labels": ",".join(sorted(GPU_LABELS)),
    }
    node["metadata"]["managedFields"] = [
        {"manager": m, "operation": "Update", "apiVersion": "v1", "time": now, "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in list(GPU_LABELS)[: 20 if m == "nfd" else 5]}}}}
        for m in ("kubelet", "nfd", "gpu-operator")
    ]
    status = node["status"]
    status["images"] = IMAGES  # shared: the fake copies what it hands out, and its JSON is as large as ever
    status["conditions"] = [
        {"type": t, "status": "True" if t == "Ready" else "False", "lastHeartbeatTime": now, "lastTransitionTime": now,
         "reason": f"Kubelet{t}", "message": f"kubelet reports {t} as expected on this node"}
        for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable", "Ready")
    ]
    status["nodeInfo"].update({
        "machineID": _digest(name)[:32], "systemUUID": _digest(name + "s")[:36], "osImage": "Ubuntu 22.04.5 LTS",
        "containerRuntimeVersion": "containerd://1.7.22", "kubeProxyVersion": "v1.31.4", "operatingSystem": "linux",
        "architecture": "amd64",
    })
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
    return node


def fleet_objects(nodes: int, pods: int, *, owners: bool = False) -> list[dict[str, Any]]:
    """Nodes, pods (PODS_PER_APP per app, an app's pods on different nodes) and PodDisruptionBudgets.

    `owners`: each app is also a Deployment with its ReplicaSet, and its pods name the ReplicaSet as their
    controller (what context gathering reads per pod: pod -> ReplicaSet -> Deployment).
    """
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    objects = [node_object(i, now) for i in range(nodes)]
    replicasets: dict[int, dict[str, Any]] = {}
    if owners:
        for app in range((pods + PODS_PER_APP - 1) // PODS_PER_APP):
            namespace, labels = f"ml-{app % NAMESPACES}", {"app": f"train-{app}"}
            deployment = builders.deployment_body(f"train-{app}", namespace, PODS_PER_APP, labels)
            deployment["metadata"]["uid"] = f"d-{app:08d}"
            replicaset = builders.replicaset_body(f"train-{app}-7c9d", namespace, PODS_PER_APP, labels, deployment)
            replicaset["metadata"]["uid"] = f"r-{app:08d}"
            replicasets[app] = replicaset
            objects += [deployment, replicaset]
    for i in range(pods):
        app = i // PODS_PER_APP
        pod = builders.pod_body(f"worker-{i:06d}", f"ml-{app % NAMESPACES}", node=f"gpu-{(i * 7919) % nodes:05d}",
                                gpus=1, labels={"app": f"train-{app}"}, owner=replicasets.get(app))
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        objects.append(pod)
    for app in range(0, pods // PODS_PER_APP, 10):
        objects.append(builders.pdb_body(f"train-{app}", f"ml-{app % NAMESPACES}",
                                         {"matchLabels": {"app": f"train-{app}"}}, max_unavailable=1))
    return objects


async def kubelet(fake: FakeKube, nodes: int, period: float) -> None:
    """Rewrite one node's Ready heartbeat every period/nodes seconds (what nodeStatusReportFrequency does)."""
    rt = resource_type("nodes")
    index = 0
    interval = period / nodes
    next_at = time.monotonic()
    while True:
        name = f"gpu-{index % nodes:05d}"
        stored = fake.store.objects[rt.ref, None, name]
        if not stored.deleted:
            old = stored.raw
            beat = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            conditions = [{**c, "lastHeartbeatTime": beat} for c in old["status"]["conditions"]]
            fake.store.put(rt, None, name, {**old, "status": {**old["status"], "conditions": conditions}})
            del stored.history[:-1]  # keep the fake's memory flat; the change log below is the watch's history
        index += 1
        if len(fake.store.changes) > 4 * nodes:
            del fake.store.changes[: 2 * nodes]
            fake.store.compacted = fake.store.changes[0].revision - 1
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))


# ------------------------------------------------------------------ measuring

class Sampler:
    """Resident memory of the controller: its process and, with the worker process, that one too."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.last = pid, 0.0, 0.0
        self.parts: list[float] = []

    async def run(self) -> None:
        while True:
            try:
                self.parts = tree_rss_mb(self.pid)
            except OSError:
                return
            self.last = sum(self.parts)
            self.peak = max(self.peak, self.last)
            await asyncio.sleep(0.25)


def traffic(fake: FakeKube, since_call: int, bytes_before: int, seconds: float) -> dict[str, Any]:
    verbs = Counter(f"{c.verb} {c.plural}" for c in fake.calls[since_call:])
    total = sum(c.bytes for c in fake.calls)
    per_minute = 60.0 / seconds
    return {
        "requests": {k: v * per_minute for k, v in sorted(verbs.items())},
        "mb_per_min": (total - bytes_before) / 1e6 * per_minute,
    }


async def alerts(url: str, nodes: int) -> None:
    rng = random.Random(7)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
        while True:
            batch = [am_alert(xid_labels(f"gpu-{rng.randrange(nodes):05d}", 79, gpu=str(rng.randrange(8)),
                                         uuid=f"GPU-{rng.getrandbits(64):016x}")) for _ in range(10)]
            (await client.post(f"{url}/api/v1/alerts", json=am_payload(*batch))).raise_for_status()
            await asyncio.sleep(1.0)


async def measure(mode: str, args: argparse.Namespace, objects_for: Any, work: Path) -> dict[str, Any]:
    async with FakeKube() as fake:
        for ns in range(NAMESPACES):
            fake.add_namespace(f"ml-{ns}")
        loaded = time.perf_counter()
        fake.load(objects_for())
        load_s = time.perf_counter() - loaded
        env = {
            "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{work / f'fleet-{mode}.db'}",
            "REMEDIATOR_WEBHOOK_TOKEN": TOKEN, "REMEDIATOR_LOG_LEVEL": "WARNING",
            "REMEDIATOR_KUBECONFIG": str(write_kubeconfig(work / f"kubeconfig-{mode}", fake.url)),
            "REMEDIATOR_MAX_QUARANTINED_NODES": "1%", "BENCH_LIST_INTERVAL": str(args.list_interval),
            "REMEDIATOR_WORKER_PROCESS": "true" if mode == "process" else "false",
        }
        proc = ControllerProcess(work, env, name=f"fleet-{mode}",
                                 python_args=("-c", PRELUDE) if mode == "list" else ("-m", "remediator.cli"))
        beats = asyncio.create_task(kubelet(fake, args.nodes, args.status_period))
        started = time.perf_counter()
        start = asyncio.create_task(proc.start(timeout=600))
        while proc.proc is None:
            await asyncio.sleep(0.01)
        sampler = Sampler(proc.proc.pid)
        sampling = asyncio.create_task(sampler.run())
        result: dict[str, Any] = {"mode": mode, "load_s": load_s}
        try:
            await start
            result["ready_s"] = time.perf_counter() - started
            result["startup"] = traffic(fake, 0, 0, 60.0)  # totals, not rates
            result["startup_rss_peak"] = sampler.peak
            for phase in ("rest", "load"):
                sampler.peak = 0.0
                mark, bytes_before = len(fake.calls), sum(c.bytes for c in fake.calls)
                sender = asyncio.create_task(alerts(proc.url, args.nodes)) if phase == "load" else None
                await asyncio.sleep(args.seconds)
                if sender is not None:
                    sender.cancel()
                result[phase] = {**traffic(fake, mark, bytes_before, args.seconds),
                                 "rss_end": sampler.last, "rss_peak": sampler.peak, "rss_parts": sampler.parts}
        finally:
            for task in (beats, sampling):
                task.cancel()
            await proc.stop()
        return result


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          f"nodes={args.nodes} pods={args.pods} seconds/phase={args.seconds} "
          f"status-period={args.status_period}s list-interval={args.list_interval}s")
    print(f"node object size: {len(json.dumps(node_object(0, '2026-12-03T00:00:00Z'))) / 1000:.1f} KB")
    print("| inventory | start-up: ready s / MB read / peak RSS MB | phase | RSS MB end / peak "
          "| API requests per min by verb | MB read per min |")
    print("|---|---|---|---|---|---|")
    for r in results:
        up = r["startup"]
        label = {"list": f"list every {args.list_interval:g}s (baseline)", "watch": "watch",
                 "process": "watch, worker in its own process"}[r["mode"]]
        for phase in ("rest", "load"):
            p = r[phase]
            verbs = ", ".join(f"{k} {v:.1f}" for k, v in p["requests"].items()) or "none"
            parts = f" ({' + '.join(f'{mb:.0f}' for mb in p['rss_parts'])})" if len(p["rss_parts"]) > 1 else ""
            print(f"| {label} | {r['ready_s']:.1f} / {up['mb_per_min']:.1f} / {r['startup_rss_peak']:.0f} | {phase} "
                  f"| {p['rss_end']:.0f}{parts} / {p['rss_peak']:.0f} | {verbs} | {p['mb_per_min']:.2f} |")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = []
        for mode in args.modes.split(","):
            results.append(await measure(mode, args, lambda: fleet_objects(args.nodes, args.pods), work))
    report(results, args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=80_000)
    parser.add_argument("--seconds", type=float, default=120.0, help="length of each phase (rest, load)")
    parser.add_argument("--status-period", type=float, default=300.0, help="seconds between a node's status writes")
    parser.add_argument("--list-interval", type=float, default=60.0, help="the baseline's list period")
    parser.add_argument("--modes", default="list,watch",
                        help="list (baseline), watch (shipped), process (watch, REMEDIATOR_WORKER_PROCESS=true)")
    parser.add_argument("--workdir", help="keep the controllers' logs and databases here")
    parser.add_argument("--smoke", action="store_true", help="200 nodes, 800 pods, 3 s phases, 1 s list period")
    parsed = parser.parse_args()
    if parsed.smoke:
        parsed.nodes, parsed.pods, parsed.seconds, parsed.list_interval = 200, 800, 3.0, 1.0
        parsed.status_period = 20.0
    asyncio.run(main(parsed))

"""The fleet view tells the truth about a real (fake-apiserver) fleet: every GPU node the inventory knows with its
GPUs' health, quarantine read from the node's own taint and cordon (a node whose quarantine outlived its
remediation is still shown, an untainted node is never shown quarantined), the breaker's room against the real
number of GPU nodes, no node made up from an `instance` label, and who paused and why. Through
`GET /api/v1/fleet` and the `/fleet` page."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.fakekube import builders
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels

TAINT = {"key": "remediator.io/gpu-unhealthy", "value": "xid-48", "effect": "NoSchedule"}


def fleet_of(fake: FakeKube) -> None:
    """gpu-1 (pods on it, quarantined by the test), gpu-2 (still tainted and cordoned from an earlier run, no
    remediation in this store), gpu-3 (one GPU of 8 left out by the device plugin, GPUHealthy=False), gpu-4
    (healthy, never touched), cpu-1 (no GPUs)."""
    gpu_node(fake, "gpu-1")
    fake.add_node("gpu-2", labels={"nvidia.com/gpu.present": "true"}, taints=[TAINT], unschedulable=True)
    sick = builders.node_body("gpu-3", "127.0.0.93", labels={"nvidia.com/gpu.present": "true"})
    sick["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    sick["status"]["conditions"].append({"type": "GPUHealthy", "status": "False", "reason": "Xid79"})
    fake.put(sick)
    fake.add_node("gpu-4", labels={"nvidia.com/gpu.present": "true"})
    fake.add_node("cpu-1", gpus=0)


async def fleet(cluster: Cluster) -> dict[str, Any]:
    r = await cluster.api.get("/api/v1/fleet")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_fleet_reads_nodes_as_they_are_and_the_breaker_against_the_real_fleet(
    make_cluster: MakeCluster,
) -> None:
    cluster: Cluster = await make_cluster()
    fleet_of(cluster.fake)
    await cluster.worker.refresh_inventory()
    watch = asyncio.create_task(cluster.worker._inventory_loop())
    try:
        await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
        # An exporter scraped by address: `instance` names no node the inventory has.
        stray = {k: v for k, v in xid_labels("x", 79, uuid="GPU-0000-stray").items() if k != "Hostname"}
        await cluster.post(am_payload(am_alert({**stray, "instance": "127.0.0.250:9400"})))
        await cluster.settle()

        body = await fleet(cluster)
        nodes = {n["node"]: n for n in body["nodes"]}
        # Every GPU node, touched or not; the CPU node is not a GPU node; no node named after the address.
        assert set(nodes) == {"gpu-1", "gpu-2", "gpu-3", "gpu-4"}
        assert [e["target"] for e in body["elsewhere"]] == ["node:127.0.0.250"]
        # gpu-1: quarantined by this controller; gpu-2: its quarantine stays though no remediation holds it.
        assert nodes["gpu-1"]["in_quarantine"] and "quarantined" in nodes["gpu-1"]["flags"]
        assert nodes["gpu-1"]["gpus"]["taints"] == ["remediator.io/gpu-unhealthy=xid-79:NoSchedule"]
        assert nodes["gpu-2"]["in_quarantine"] and nodes["gpu-2"]["flags"] == ["quarantined"]
        assert nodes["gpu-2"]["gpus"]["cordoned"] is True
        assert nodes["gpu-3"]["flags"] == ["GPU unhealthy"] and not nodes["gpu-3"]["in_quarantine"]
        assert nodes["gpu-3"]["gpus"] == {"health": "unhealthy", "gpus": 8, "allocatable": 7, "condition": "False",
                                          "cordoned": False, "taints": []}
        assert nodes["gpu-4"]["flags"] == [] and nodes["gpu-4"]["gpus"]["health"] == "healthy"
        assert body["counts"]["quarantined_nodes"] == 2 and body["counts"]["gpu_nodes"] == 4
        assert body["counts"]["unhealthy_gpu_nodes"] == 2  # gpu-1's condition is False, gpu-3 lost a GPU
        # MAX_QUARANTINED_NODES=10 on 4 GPU nodes, 1 counted (gpu-1): 3 more at most, not "9 of 10".
        head = body["headroom"]
        assert (head["limit"], head["effective_limit"], head["allowed"], head["quarantined"]) == (10, 4, 3, 1)

        # A person lifts gpu-2's quarantine: the watch sees it, and the page no longer says quarantined.
        cluster.fake.add_node("gpu-2", labels={"nvidia.com/gpu.present": "true"})
        async with asyncio.timeout(10):
            while (nodes := {n["node"]: n for n in (await fleet(cluster))["nodes"]})["gpu-2"]["in_quarantine"]:
                await asyncio.sleep(0.05)
        assert nodes["gpu-2"]["flags"] == []

        # Who paused and why, in the JSON and on the page.
        paused = await cluster.api.post("/api/v1/pause", json={"reason": "switch firmware upgrade", "by": "dana"})
        assert paused.status_code == 200, paused.text
        body = await fleet(cluster)
        assert body["pauses"]["all"] == {"paused": True, "by": "api:dana", "reason": "switch firmware upgrade"}
        html = (await cluster.api.get("/fleet")).text
        pause = html[html.index('id="pause-all"'):]
        pause = pause[:pause.index("</li>")]
        assert "dana" in pause and "switch firmware upgrade" in pause
        assert re.search(r'id="quarantines-allowed">3 more quarantines allowed<', html)
        assert "MAX_QUARANTINED_NODES=10, more than the 4 GPU nodes the fleet has" in html
        for name in ("gpu-1", "gpu-2", "gpu-3", "gpu-4"):
            assert f'data-node="{name}"' in html
        assert 'data-node="127.0.0.250"' not in html and 'data-target="node:127.0.0.250"' in html
        row = html[html.index('data-node="gpu-3"'):]
        assert 'data-health="unhealthy"' in row[:row.index("</tr>")] and "7 of 8 allocatable" in row
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)


async def test_a_percent_limit_resolves_against_the_gpu_nodes(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster(max_quarantined_nodes="50%")
    fleet_of(cluster.fake)
    await cluster.worker.refresh_inventory()
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()
    head = (await fleet(cluster))["headroom"]
    assert (head["limit"], head["effective_limit"], head["allowed"], head["quarantined"]) == (2, 2, 1, 1)
    html = (await cluster.api.get("/fleet")).text
    assert "1 more quarantine allowed" in html and "MAX_QUARANTINED_NODES=50%: 2 of 4 GPU nodes" in html

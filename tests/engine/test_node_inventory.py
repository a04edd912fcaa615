"""The running worker keeps the guardrail's GPU node count and the IP map current from the node watch."""

from __future__ import annotations

import asyncio

from tests.engine.conftest import Cluster, MakeCluster


async def test_the_running_worker_follows_nodes_without_listing_again(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    fake, rt = cluster.fake, cluster.rt
    fake.bookmark_interval = 0.05
    before = rt.gpu_nodes
    await cluster.worker.start()
    lists = len(fake.requests("list", "nodes"))
    fake.add_node("gpu-new", ip="127.0.3.9", labels={"nvidia.com/gpu.present": "true"})
    await fake.wait_for(lambda: rt.gpu_nodes == before + 1 and rt.nodes_by_ip.get("127.0.3.9") == "gpu-new")
    fake.remove("nodes", None, "gpu-new")
    await fake.wait_for(lambda: rt.gpu_nodes == before and "127.0.3.9" not in rt.nodes_by_ip)
    await asyncio.sleep(0.3)  # at rest: bookmarks only
    assert len(fake.requests("list", "nodes")) == lists
    assert len(fake.requests("watch", "nodes")) == 1

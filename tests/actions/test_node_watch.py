"""The node inventory follows the fleet by one list and a watch: adds, updates, deletes, bookmarks, 410."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from remediator.adapters.kube import KubeAdapter
from remediator.adapters.node_watch import NodeWatch
from remediator.kube.inventory import NodeInventory
from tests.fakekube import FakeKube

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def watching(kube_adapter: KubeAdapter, fake_kube: FakeKube) -> AsyncIterator[Callable[[], NodeWatch]]:
    tasks: list[asyncio.Task[None]] = []

    def start() -> NodeWatch:
        watch = NodeWatch(kube_adapter, watch_timeout=(30, 30), backoff=(0.01, 0.05))
        tasks.append(asyncio.create_task(watch.run()))
        return watch

    yield start
    for task in tasks:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def until(fake: FakeKube, predicate: Callable[[], bool]) -> None:
    await fake.wait_for(predicate, timeout=10)


def test_inventory_counts_gpu_nodes_by_label_or_allocatable() -> None:
    inventory = NodeInventory()
    inventory.replace([
        {"metadata": {"name": "labelled", "labels": {"nvidia.com/gpu.present": "true"}}},
        {"metadata": {"name": "allocatable"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
        {"metadata": {"name": "cpu"}, "status": {"allocatable": {"nvidia.com/gpu": "0"},
                                                 "addresses": [{"type": "InternalIP", "address": "10.0.0.3"},
                                                               {"type": "Hostname", "address": "cpu"}]}},
    ], "7")
    assert (inventory.gpu_nodes, inventory.nodes_by_ip, inventory.resource_version) == (2, {"10.0.0.3": "cpu"}, "7")
    inventory.apply("DELETED", {"metadata": {"name": "labelled", "resourceVersion": "9"}})
    inventory.apply("MODIFIED", {"metadata": {"name": "cpu", "resourceVersion": "10"},
                                 "status": {"allocatable": {"nvidia.com/gpu": "4"}}})
    assert (inventory.gpu_nodes, inventory.nodes_by_ip, inventory.resource_version) == (2, {}, "10")


async def test_node_pages_are_read_in_pages_with_the_lists_version(
    kube_adapter: KubeAdapter, fake_kube: FakeKube
) -> None:
    for i in range(5):
        fake_kube.add_node(f"n{i}")
    pages = [page async for page in kube_adapter.node_pages(page_size=2)]
    assert [len(items) for items, _ in pages] == [2, 2, 1]
    assert {version for _, version in pages} == {str(fake_kube.store.revision)}
    assert [c.params.get("limit") for c in fake_kube.requests("list", "nodes")] == ["2", "2", "2"]


async def test_the_watch_follows_adds_updates_and_deletes_after_one_list(
    fake_kube: FakeKube, watching: Callable[[], NodeWatch]
) -> None:
    fake_kube.add_node("gpu-1", ip="127.0.0.11", labels={"nvidia.com/gpu.present": "true"})
    watch = watching()
    inventory = watch.inventory
    await until(fake_kube, lambda: fake_kube.open_watches == 1)
    assert (inventory.gpu_nodes, inventory.nodes_by_ip) == (1, {"127.0.0.11": "gpu-1"})

    fake_kube.add_node("gpu-2", ip="127.0.0.12", labels={"nvidia.com/gpu.present": "true"})
    await until(fake_kube, lambda: inventory.gpu_nodes == 2 and "127.0.0.12" in inventory.nodes_by_ip)
    fake_kube.write("nodes", None, "gpu-1", {"metadata": {"labels": {"nvidia.com/gpu.present": "false"}},
                                            "status": {"allocatable": {"nvidia.com/gpu": "0"}}})
    await until(fake_kube, lambda: inventory.gpu_nodes == 1)
    fake_kube.remove("nodes", None, "gpu-2")
    await until(fake_kube, lambda: inventory.gpu_nodes == 0 and inventory.nodes_by_ip == {"127.0.0.11": "gpu-1"})
    assert inventory.resource_version == str(fake_kube.store.revision)
    assert (len(fake_kube.requests("list", "nodes")), len(fake_kube.requests("watch", "nodes"))) == (1, 1)


async def test_410_gone_lists_again_and_the_watch_resumes(
    fake_kube: FakeKube, watching: Callable[[], NodeWatch]
) -> None:
    fake_kube.bookmark_interval = 1000  # no bookmark: the client's version stays behind
    watch = watching()
    await until(fake_kube, lambda: fake_kube.open_watches == 1)
    seen = watch.inventory.resource_version
    fake_kube.add_namespace("moves-the-revision")
    fake_kube.expire_watches()  # compacted past `seen`, stream closed before it sends anything more
    fake_kube.add_node("added-while-away", labels={"nvidia.com/gpu.present": "true"})
    await until(fake_kube, lambda: "added-while-away" in watch.inventory)
    assert watch.lists == 2
    first_resume = fake_kube.requests("watch", "nodes")[1]
    assert first_resume.params["resourceVersion"] == seen
    await until(fake_kube, lambda: fake_kube.open_watches == 1)
    assert fake_kube.requests("watch", "nodes")[-1].params["resourceVersion"] == str(fake_kube.store.revision)


async def test_bookmarks_advance_the_version_a_watch_resumes_from(
    fake_kube: FakeKube, watching: Callable[[], NodeWatch]
) -> None:
    fake_kube.bookmark_interval = 0.05
    watch = watching()
    await until(fake_kube, lambda: fake_kube.open_watches == 1)
    fake_kube.add_namespace("not-a-node")
    target = str(fake_kube.store.revision)
    await until(fake_kube, lambda: watch.inventory.resource_version == target)
    fake_kube.end_watches()
    await until(fake_kube, lambda: len(fake_kube.requests("watch", "nodes")) == 2)
    resumed = fake_kube.requests("watch", "nodes")[1]
    assert resumed.params["resourceVersion"] == target
    assert resumed.params["allowWatchBookmarks"] == "true"
    assert watch.lists == 1


async def test_a_failed_watch_is_reopened_without_listing_again(
    fake_kube: FakeKube, watching: Callable[[], NodeWatch]
) -> None:
    fake_kube.fail("watch", "nodes", 500, times=2)
    watch = watching()
    await until(fake_kube, lambda: fake_kube.open_watches == 1)
    assert [c.status for c in fake_kube.requests("watch", "nodes")] == [500, 500, 200]
    assert watch.lists == 1


@pytest.mark.parametrize("nodes", [3, 1200])
async def test_requests_at_rest_do_not_grow_with_the_node_count(
    nodes: int, fake_kube: FakeKube, watching: Callable[[], NodeWatch]
) -> None:
    fake_kube.bookmark_interval = 0.05
    for i in range(nodes):
        fake_kube.add_node(f"n{i:05d}", ip=f"127.1.{i // 250}.{i % 250 + 1}", labels={"nvidia.com/gpu.present": "true"})
    watch = watching()
    await until(fake_kube, lambda: fake_kube.open_watches == 1)
    assert watch.inventory.gpu_nodes == nodes
    synced_at = len(fake_kube.calls)
    fake_kube.add_namespace("unrelated")  # the cluster moves on; no node changes
    await asyncio.sleep(0.5)  # about ten bookmark intervals at rest
    at_rest = fake_kube.calls[synced_at:]
    assert at_rest == []  # not one request: the watch opened before stays open
    watch_call = fake_kube.requests("watch", "nodes")[0]
    assert 0 < watch_call.bytes < 2000  # bookmarks only, whatever the fleet size


async def test_a_watch_that_keeps_expiring_at_once_backs_off(kube_adapter: KubeAdapter, fake_kube: FakeKube) -> None:
    def expire(call: object) -> None:
        fake_kube.add_namespace(f"moves-{len(fake_kube.calls)}")
        fake_kube.store.compact()  # every watch finds its version compacted away: 410, list, 410, ...

    fake_kube.before("watch", "nodes", expire, times=1000)
    watch = NodeWatch(kube_adapter, watch_timeout=(30, 30), backoff=(0.1, 0.2))
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 2 <= len(fake_kube.requests("watch", "nodes")) <= 12  # not hundreds: about one per backoff
    assert watch.lists >= 2  # each 410 made it list again


async def test_each_list_and_each_bookmark_tells_on_resync_and_events_do_not(
    kube_adapter: KubeAdapter, fake_kube: FakeKube
) -> None:
    """What the hand-change reconcile hangs on: `LISTED` after every full list (start-up, after a 410),
    `BOOKMARK` at each bookmark; a node's own event is not a resync."""
    resyncs: list[str] = []
    fake_kube.bookmark_interval = 1000
    watch = NodeWatch(kube_adapter, on_resync=resyncs.append, watch_timeout=(30, 30), backoff=(0.01, 0.05))
    task = asyncio.create_task(watch.run())
    try:
        await until(fake_kube, lambda: fake_kube.open_watches == 1)
        assert resyncs == ["LISTED"]
        fake_kube.add_node("new-node")
        await until(fake_kube, lambda: "new-node" in watch.inventory)
        assert resyncs == ["LISTED"]
        fake_kube.add_namespace("moves-the-revision")
        fake_kube.expire_watches()
        await until(fake_kube, lambda: resyncs == ["LISTED", "LISTED"])
        fake_kube.bookmark_interval = 0.05
        fake_kube.end_watches()
        await until(fake_kube, lambda: "BOOKMARK" in resyncs)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

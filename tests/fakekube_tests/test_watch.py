"""Watch on the fake apiserver: events from a resourceVersion, bookmarks, 410 after compaction, timeouts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakekube import FakeKube

pytestmark = pytest.mark.timeout(20)


async def events(fake: FakeKube, count: int, **params: str) -> list[dict[str, Any]]:
    """The first `count` events of a watch on nodes (the stream is closed after them)."""
    found: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session, session.get(
        f"{fake.url}/api/v1/nodes", params={"watch": "true", **params}
    ) as resp:
        assert resp.status == 200
        async for line in lines(resp):
            found.append(json.loads(line))
            if len(found) == count:
                break
    return found


async def lines(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    buffer = b""
    async for chunk in resp.content.iter_any():
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line


async def test_watch_from_a_version_sends_later_changes_in_order(fake_kube: FakeKube) -> None:
    fake_kube.add_node("n1")
    start = fake_kube.store.revision
    fake_kube.add_node("n2")
    fake_kube.write("nodes", None, "n1", {"metadata": {"labels": {"x": "1"}}})
    fake_kube.add_namespace("other")  # not a node: not sent
    fake_kube.remove("nodes", None, "n2")
    got = await events(fake_kube, 3, resourceVersion=str(start))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [
        ("ADDED", "n2"), ("MODIFIED", "n1"), ("DELETED", "n2")]
    assert got[1]["object"]["metadata"]["labels"]["x"] == "1"


async def test_watch_streams_a_change_made_while_it_is_open(fake_kube: FakeKube) -> None:
    start = fake_kube.store.revision
    task = asyncio.create_task(events(fake_kube, 1, resourceVersion=str(start)))
    await fake_kube.wait_for(lambda: fake_kube.open_watches == 1)
    fake_kube.add_node("late")
    got = await task
    assert got[0]["type"] == "ADDED" and got[0]["object"]["metadata"]["name"] == "late"


async def test_watch_without_version_starts_with_every_current_object(fake_kube: FakeKube) -> None:
    fake_kube.add_node("a", labels={"pool": "x"})
    fake_kube.add_node("b")
    got = await events(fake_kube, 1, labelSelector="pool=x")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [("ADDED", "a")]


async def test_bookmark_carries_the_current_revision(fake_kube: FakeKube) -> None:
    fake_kube.bookmark_interval = 0.05
    start = fake_kube.store.revision
    fake_kube.add_namespace("elsewhere")  # the revision moves, no node changes
    got = await events(fake_kube, 1, resourceVersion=str(start), allowWatchBookmarks="true")
    assert got[0]["type"] == "BOOKMARK"
    assert got[0]["object"]["metadata"]["resourceVersion"] == str(fake_kube.store.revision)


async def test_a_compacted_version_gets_410_expired(fake_kube: FakeKube) -> None:
    start = fake_kube.store.revision
    fake_kube.add_node("n1")
    fake_kube.expire_watches()
    got = await events(fake_kube, 1, resourceVersion=str(start))
    assert got[0]["type"] == "ERROR"
    assert (got[0]["object"]["code"], got[0]["object"]["reason"]) == (410, "Expired")


async def test_timeout_seconds_ends_the_stream_and_bytes_are_counted(fake_kube: FakeKube) -> None:
    fake_kube.add_node("n1")
    async with aiohttp.ClientSession() as session, session.get(
        f"{fake_kube.url}/api/v1/nodes", params={"watch": "true", "timeoutSeconds": "1"}
    ) as resp:
        body = await resp.read()
    assert body.count(b"\n") == 1
    assert fake_kube.requests("watch", "nodes")[0].bytes == len(body)


async def test_end_watches_closes_open_streams(fake_kube: FakeKube) -> None:
    async with aiohttp.ClientSession() as session, session.get(
        f"{fake_kube.url}/api/v1/nodes", params={"watch": "true", "resourceVersion": str(fake_kube.store.revision)}
    ) as resp:
        await fake_kube.wait_for(lambda: fake_kube.open_watches == 1)
        fake_kube.end_watches()
        assert await resp.read() == b""
    assert fake_kube.open_watches == 0

"""Keeps the node inventory (remediator/kube/inventory.py) current with one list and then a watch.

Listing every node every minute in every replica reads 10-20 KB per node each time: 100-200 MB a minute at
10,000 nodes, and the whole list held in memory while it is parsed. Here each replica lists once, in pages
of 500, keeping only a node's name, GPU flag and InternalIPs, then watches from the list's resourceVersion
with bookmarks, so at rest it holds one long request and reads only what changes.

Why full Node objects and not metadata only (`as=PartialObjectMetadataList`): the GPU count reads
`status.allocatable["nvidia.com/gpu"]` as well as the `nvidia.com/gpu.present` label (nodes without GPU
feature discovery have only the former), and the IP map reads `status.addresses`; metadata carries neither.
A metadata watch plus a lazy node read per unknown IP would make alert intake wait on the API server and
would still miss the allocatable-only GPU nodes. The cost of full objects is only paid on the first list
(paged, never whole in memory) and on actual changes; each change is reduced to its facts at once.

Resilience: a watch that ends normally (timeoutSeconds) is reopened from the last resourceVersion seen,
bookmarks included; 410 Gone (the version was compacted away), as an HTTP status or as an ERROR event,
makes it list again; any other error reopens it after an exponential backoff with jitter (1 s to 30 s).

`on_node(event_type, node)` sees every node object the list and the watch bring (`LISTED` for a node of a
list, else the watch event's type), before it is reduced to its facts: the engine's node marks
(remediator/engine/hand_changes.py) read a person's uncordon or taint removal and a reboot from it, as they
happen, instead of polling the API server. `on_resync(kind)` is called after each full list (`LISTED`: the
first one at start-up, and after a 410) and at each bookmark (`BOOKMARK`): the node marks then compare every
held node with what the watch last saw of it, so a change no event reported to this process (one made while no
controller ran, or one whose check the database could not record) is noticed too.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping

from remediator.adapters.kube import KubeAdapter
from remediator.domain.storms import node_attributes
from remediator.errors import RemediatorError
from remediator.kube.inventory import NodeFacts, NodeInventory, facts_of
from remediator.kube.views import Body, as_mapping

__all__ = ["NodeWatch"]

log = logging.getLogger(__name__)
_jitter = random.SystemRandom()  # spreads reconnects so replicas do not reconnect in step


class _Expired(RemediatorError):
    """The watch's resourceVersion is gone: list again."""


class NodeWatch:
    """`await sync()` once (a full paginated list), then `await run()` until cancelled."""

    def __init__(
        self,
        kube: KubeAdapter,
        inventory: NodeInventory | None = None,
        *,
        on_change: Callable[[NodeInventory], None] | None = None,
        on_node: Callable[[str, Mapping[str, object]], None] | None = None,
        on_resync: Callable[[str], None] | None = None,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        self.kube = kube
        self.inventory = inventory if inventory is not None else NodeInventory()
        self.on_change = on_change
        self.on_node = on_node
        self.on_resync = on_resync
        self.watch_timeout = watch_timeout
        self.backoff = backoff
        self.lists = 0
        self.watches = 0

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.inventory)

    def _seen(self, kind: str, node: Mapping[str, object]) -> None:
        if self.on_node is None:
            return
        try:
            self.on_node(kind, node)
        except Exception:  # a consumer's bug must not stop the inventory
            log.exception("node watch consumer failed on a %s event", kind)

    def _resynced(self, kind: str) -> None:
        if self.on_resync is None:
            return
        try:
            self.on_resync(kind)
        except Exception:  # a consumer's bug must not stop the inventory
            log.exception("node watch consumer failed on a %s resync", kind)

    async def sync(self) -> None:
        """List every node (paged) and replace the inventory; raises RemediatorError on failure."""
        facts: dict[str, NodeFacts] = {}
        attributes: dict[str, frozenset[tuple[str, str]]] = {}  # the storm analysis' fleet counts (storms.py)
        version = ""
        async for items, page_version in self.kube.node_pages():
            for node in items:
                name = Body(node).name or ""
                facts[name] = facts_of(node)
                if name:
                    attributes[name] = node_attributes(node)
                self._seen("LISTED", node)
            version = page_version or version
        self.lists += 1
        self.inventory.replace_facts(facts, version)
        self.inventory.attributes.replace(attributes)
        self._changed()
        self._resynced("LISTED")

    async def watch_once(self) -> None:
        """One watch request from the inventory's resourceVersion, applied event by event until it ends."""
        low, high = self.watch_timeout
        self.watches += 1
        async for event in self.kube.watch_nodes(
            self.inventory.resource_version or "", timeout_seconds=_jitter.randint(low, high)
        ):
            kind = str(event.get("type", ""))
            obj = as_mapping(event.get("object"))
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise _Expired(str(obj.get("message", "")))
                raise RemediatorError(f"node watch error: {obj.get('message', obj)}")
            self.inventory.apply(kind, obj)
            if kind != "BOOKMARK":
                self._seen(kind, obj)
                self._changed()
            else:
                self._resynced(kind)

    async def run(self) -> None:
        """List if not yet synced, then watch forever: resume, relist on 410, back off on errors."""
        loop = asyncio.get_running_loop()
        delay = self.backoff[0]
        while True:
            started, failed = loop.time(), False
            try:
                if not self.inventory.synced:
                    await self.sync()
                await self.watch_once()
            except _Expired as exc:
                log.info("node watch expired (%s): listing nodes again", exc)
                self.inventory.synced = False
            except RemediatorError as exc:
                if getattr(exc, "status", None) == 410:
                    log.info("node watch expired: listing nodes again")
                    self.inventory.synced = False
                else:
                    log.warning("node inventory watch failed, retrying in about %.1f s: %s", delay, exc)
                    failed = True
            if not failed and loop.time() - started >= 1.0:
                delay = self.backoff[0]
                continue
            # an error, or a stream that ended (or expired) at once: never let it become a request loop
            await asyncio.sleep(delay * _jitter.uniform(0.5, 1.0))
            delay = min(delay * 2, self.backoff[1])

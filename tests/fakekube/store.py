"""Object storage for the fake apiserver: kmock's ObjectsArray plus a cluster-wide resourceVersion.

Every write goes through `put`/`remove`, which bump the revision (as etcd does), stamp
metadata.resourceVersion and append to kmock's per-object history and to `changes`, the ordered log
tests replay to ask questions such as "how many nodes were cordoned at the same time" and that watches
replay from a resourceVersion. `compacted` is the oldest revision a watch may resume from (etcd compaction):
older ones are answered 410 Gone. `load` fills the store in bulk without history (benchmarks with 10,000s of
objects); it compacts, as a real cluster's history before a client arrived is gone too.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kmock

from remediator.kube.kinds import KINDS
from tests.fakekube.copies import deep_copy

__all__ = ["RESOURCES", "Change", "FakeClock", "ResourceType", "Store", "resource_type"]


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = True

    @property
    def api_version(self) -> str:
        return self.version if self.group == "" else f"{self.group}/{self.version}"

    @property
    def ref(self) -> kmock.resource:
        return kmock.resource(self.group, self.version, self.plural)

    def qualified(self) -> str:
        return self.plural if self.group == "" else f"{self.plural}.{self.group}"


# Served kinds: the controller's kind table (remediator/kube/kinds.py), the one list of the kinds it calls,
# plus the kinds a cluster holds that the API server itself consults (PodDisruptionBudgets on eviction) or
# that only the Lease Role names. Which of them has a `status` subresource is the server's business.
_WITHOUT_STATUS = ("Event", "Lease")
_SERVER_ONLY = [
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True, has_status=False),
]
_TYPES = [
    ResourceType(k.group, k.version, k.plural, k.kind, k.namespaced, has_status=k.kind not in _WITHOUT_STATUS)
    for k in KINDS
] + _SERVER_ONLY
RESOURCES: dict[tuple[str, str, str], ResourceType] = {(t.group, t.version, t.plural): t for t in _TYPES}
BY_PLURAL: dict[str, ResourceType] = {t.plural: t for t in _TYPES}


def resource_type(plural: str) -> ResourceType:
    return BY_PLURAL[plural]


class FakeClock:
    """Seconds since the fake started; runs at 1/scale of real speed or stands still, and can jump."""

    def __init__(self, scale: float | None = 0.01) -> None:
        self._epoch = time.time()
        self._base = 0.0
        self._real0 = time.monotonic()
        self._scale = scale

    def now(self) -> float:
        if self._scale is None:
            return self._base
        return self._base + (time.monotonic() - self._real0) / self._scale

    def set_scale(self, scale: float | None) -> None:
        """None freezes the clock; 0.01 makes one fake second last 10 ms."""
        self._base = self.now()
        self._real0 = time.monotonic()
        self._scale = scale

    def advance(self, seconds: float) -> None:
        self._base += seconds

    def wall(self, at: float | None = None) -> str:
        moment = self._epoch + (self.now() if at is None else at)
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


@dataclass(frozen=True)
class Change:
    revision: int
    plural: str
    namespace: str | None
    name: str
    object: dict[str, Any] | None  # None: removed
    type: str = "MODIFIED"  # the watch event: ADDED, MODIFIED, DELETED
    last: dict[str, Any] | None = None  # for DELETED: the object as it was last stored


class Store:
    def __init__(self, objects: kmock.ObjectsArray) -> None:
        self.objects = objects
        self.revision = 0
        self.compacted = 0
        self.changes: list[Change] = []
        self.listeners: list[Callable[[], None]] = []
        # plural -> (namespace, name) -> the stored object: lists read this, not kmock's wrappers (90,000 objects)
        self._live: dict[str, dict[tuple[str | None, str], dict[str, Any]]] = {}
        # spec.nodeName -> pods on it, as the apiserver's watch cache indexes pods (what kubelets list by)
        self._pods_by_node: dict[str, set[tuple[str | None, str]]] = {}

    def _index(self, plural: str, key: tuple[str | None, str], old: Any, new: Any) -> None:
        if plural != "pods":
            return
        before = ((old or {}).get("spec") or {}).get("nodeName")
        after = ((new or {}).get("spec") or {}).get("nodeName")
        if before == after:
            return
        if before:
            self._pods_by_node.get(str(before), set()).discard(key)
        if after:
            self._pods_by_node.setdefault(str(after), set()).add(key)

    def _notify(self) -> None:
        for listener in list(self.listeners):
            listener()

    def changes_after(self, revision: int) -> Iterator[Change]:
        """The changes with a revision above `revision`, oldest first."""
        start = bisect.bisect_right(self.changes, revision, key=lambda c: c.revision)
        yield from self.changes[start:]

    def compact(self) -> None:
        """Forget history: a watch from any revision before now is answered 410 Gone."""
        self.compacted = self.revision

    def load(self, rt: ResourceType, namespace: str | None, name: str, obj: dict[str, Any]) -> None:
        """Store `obj` as is (no copy, no change log): bulk loading before any client watches."""
        self.revision += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.revision)
        self.objects[rt.ref, namespace, name] = obj
        live = self._live.setdefault(rt.plural, {})
        self._index(rt.plural, (namespace, name), live.get((namespace, name)), obj)
        live[namespace, name] = obj
        self.compacted = self.revision

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        found = self._live.get(rt.plural, {}).get((namespace, name))
        return None if found is None else deep_copy(found)

    def put(self, rt: ResourceType, namespace: str | None, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.revision += 1
        stored = deep_copy(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.revision)
        key = (rt.ref, namespace, name)
        event = "MODIFIED" if key in self.objects and not self.objects[key].deleted else "ADDED"
        if key in self.objects:
            self.objects[key].create(stored)
        else:
            self.objects[key] = stored
        live = self._live.setdefault(rt.plural, {})
        self._index(rt.plural, (namespace, name), live.get((namespace, name)), stored)
        live[namespace, name] = stored
        self.changes.append(Change(self.revision, rt.plural, namespace, name, deep_copy(stored), event))
        self._notify()
        return deep_copy(stored)

    def remove(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        self.revision += 1
        entry = self.objects[rt.ref, namespace, name]
        last = deep_copy(entry.raw)
        last["metadata"]["resourceVersion"] = str(self.revision)
        entry.delete()
        self._index(rt.plural, (namespace, name), self._live.get(rt.plural, {}).pop((namespace, name), None), None)
        self.changes.append(Change(self.revision, rt.plural, namespace, name, None, "DELETED", last))
        self._notify()

    def items(self, rt: ResourceType, namespace: str | None = None) -> list[dict[str, Any]]:
        return [deep_copy(o) for o in self.stored(rt, namespace)]

    def stored(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        where: Callable[[dict[str, Any]], bool] | None = None,
        *,
        node: str | None = None,
    ) -> list[dict[str, Any]]:
        """The stored objects themselves (callers copy what they hand out), sorted, filtered by `where`.

        `node` (pods only) narrows the scan to the pods whose spec.nodeName is `node`, from the index.
        """
        live = self._live.get(rt.plural, {})
        keys = live.keys() if node is None else self._pods_by_node.get(node, set())
        found = [
            (ns or "", name, obj)
            for (ns, name), obj in ((key, live[key]) for key in keys)
            if (namespace is None or ns == namespace) and (where is None or where(obj))
        ]
        found.sort(key=lambda entry: (entry[0], entry[1]))
        return [obj for _ns, _name, obj in found]

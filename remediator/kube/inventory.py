"""The controller's node inventory: the few facts it needs about every node, kept from a list and a watch.

The guardrail's percent limit needs the number of GPU nodes, alert intake needs InternalIP -> node name
(for `instance` labels) and the fleet page (engine/fleet.py) shows every GPU node as it is: tainted or
cordoned, and its GPUs' health (capacity and allocatable `nvidia.com/gpu`, the `GPUHealthy` condition).
Fetching whole Node objects for that every minute costs the API server 10-20 KB per node per replica; this
cache keeps, per node, only those few facts, and is fed by one paginated list followed by watch events
(remediator/adapters/node_watch.py). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from remediator.domain.storms import FleetCounts, node_attributes
from remediator.kube.views import Body, Node, NodeTaint

__all__ = ["GPU_CONDITION", "NodeFacts", "NodeInventory", "facts_of"]

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_CONDITION = "GPUHealthy"  # the node condition the playbooks set (actions/conditions.py)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    gpu: bool
    internal_ips: tuple[str, ...]
    unschedulable: bool = False  # cordoned
    taints: tuple[str, ...] = ()  # "key=value:effect" (or "key:effect"), as the node carries them
    gpus: int = 0  # capacity nvidia.com/gpu
    gpus_allocatable: int = 0  # allocatable nvidia.com/gpu (the device plugin leaves unhealthy GPUs out)
    gpu_healthy: str | None = None  # status of the GPUHealthy condition ("True", "False", "Unknown"), if any

    def tainted(self, key: str) -> bool:
        return any(t.split("=", 1)[0].split(":", 1)[0] == key for t in self.taints)

    def as_list(self) -> list[object]:
        """A JSON row (the worker process sends the inventory to the web process as these)."""
        return [self.gpu, list(self.internal_ips), self.unschedulable, list(self.taints), self.gpus,
                self.gpus_allocatable, self.gpu_healthy]

    @classmethod
    def from_list(cls, row: list[Any]) -> NodeFacts:
        gpu, ips, unschedulable, taints, gpus, allocatable, healthy = row
        return cls(bool(gpu), tuple(str(i) for i in ips), bool(unschedulable), tuple(str(t) for t in taints),
                   int(gpus), int(allocatable), None if healthy is None else str(healthy))


def _count(value: object) -> int:
    try:
        return max(0, int(str(value)))
    except ValueError:
        return 0


def _taint(taint: NodeTaint) -> str:
    key, value, effect = taint.key or "", taint.value, taint.effect or ""
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def facts_of(node: Mapping[str, object]) -> NodeFacts:
    """A GPU node has the GPU feature discovery label or allocatable nvidia.com/gpu above zero."""
    view = Node(node)
    allocatable = view.allocatable
    gpu = view.labels.get(GPU_PRESENT_LABEL) == "true" or str(allocatable.get(GPU_RESOURCE, "0")) not in ("0", "")
    ips = tuple(address or "" for kind, address in view.addresses if kind == "InternalIP")
    condition = view.condition(GPU_CONDITION)
    healthy = None if condition is None else str(condition.raw.get("status"))
    return NodeFacts(
        gpu=gpu, internal_ips=ips, unschedulable=view.unschedulable,
        taints=tuple(_taint(t) for t in view.taints),
        gpus=_count(view.capacity.get(GPU_RESOURCE, 0)),
        gpus_allocatable=_count(allocatable.get(GPU_RESOURCE, 0)), gpu_healthy=healthy,
    )


class NodeInventory:
    """Name -> NodeFacts, with the GPU node count and the IP map kept current on every change.

    `nodes_by_ip` is rebuilt (a new dict) only when an address changes, so a reader holding the old mapping
    never sees it change under it. `resource_version` is where a watch resumes.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, NodeFacts] = {}
        self.gpu_nodes = 0
        self.nodes_by_ip: dict[str, str] = {}
        self.resource_version: str | None = None
        self.synced = False
        self.version = 0  # counts changes of the facts (the worker process sends them when it moves)
        # Every node's labels, nodeInfo versions and time buckets, counted for the storm analysis (storms.py):
        # kept from the same list and watch events, only where whole Node objects are seen (the worker).
        self.attributes = FleetCounts()

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def get(self, name: str) -> NodeFacts | None:
        return self._nodes.get(name)

    def items(self) -> list[tuple[str, NodeFacts]]:
        """Every node and its facts, by name."""
        return sorted(self._nodes.items())

    def as_dict(self) -> dict[str, list[object]]:
        return {name: f.as_list() for name, f in self._nodes.items()}

    def replace(self, nodes: Iterable[Mapping[str, object]], resource_version: str) -> None:
        """The state of a fresh list: nodes not in it are gone."""
        nodes = list(nodes)
        self.replace_facts({Body(n).name or "": facts_of(n) for n in nodes}, resource_version)
        self.attributes.replace({name: node_attributes(n) for n in nodes if (name := Body(n).name or "")})

    def replace_facts(self, facts: Mapping[str, NodeFacts], resource_version: str) -> None:
        self._nodes = {name: f for name, f in facts.items() if name}
        self.gpu_nodes = sum(f.gpu for f in self._nodes.values())
        self._rebuild_ips()
        self.resource_version = resource_version
        self.synced = True
        self.version += 1

    def apply(self, event_type: str, node: Mapping[str, object]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED or BOOKMARK); the resourceVersion moves to the event's."""
        meta = Body(node).metadata
        version = meta.resource_version
        if event_type in ("ADDED", "MODIFIED", "DELETED"):
            name = meta.name or ""
            old = self._nodes.get(name)
            new = facts_of(node) if event_type != "DELETED" else None
            if name:
                self.attributes.set(name, node_attributes(node) if new is not None else None)
            if name and old != new:
                self.version += 1
                self.gpu_nodes += int(bool(new and new.gpu)) - int(bool(old and old.gpu))
                if new is None:
                    del self._nodes[name]
                else:
                    self._nodes[name] = new
                if (old.internal_ips if old else ()) != (new.internal_ips if new else ()):
                    self._rebuild_ips()
        if version:
            self.resource_version = str(version)

    def _rebuild_ips(self) -> None:
        self.nodes_by_ip = {ip: name for name, f in sorted(self._nodes.items()) for ip in f.internal_ips}

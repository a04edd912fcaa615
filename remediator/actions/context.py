"""What a remediation knows about its target before acting: the pods on the node or GPU and who owns them.

The context is shown on the approval page and in the API, decides which pods a `gpu` drain selects and
which pods an `event` step annotates. It degrades instead of failing: without cluster access it holds what
the alert labels say; a missing owner is recorded as missing, never raised.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from remediator.actions.base import Target
from remediator.adapters.kube import KubeAdapter, KubeObject
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.errors import NotFound, NotSupported, PermanentError
from remediator.intake.normalize import EXPORTER_POD_PREFIXES, workload_pod
from remediator.kube.views import (
    Body,
    Container,
    Node,
    OwnerReference,
    Pod,
    as_list,
    as_mapping,
    json_object,
    json_value,
)
from remediator.settings import Settings

__all__ = [
    "Gathered",
    "OwnerReads",
    "alert_pod",
    "exporter_gpu_context",
    "gather",
    "gather_context",
    "gpu_request",
    "node_ready",
    "owner_chain",
    "uses_gpu",
]

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
MAX_OWNER_DEPTH = 6
NODE_LABEL_PREFIXES = ("nvidia.com/", "remediator.io/", "node.kubernetes.io/", "topology.kubernetes.io/")
NODE_LABEL_KEYS = ("kubernetes.io/hostname",)


def _is_gpu_resource(name: str) -> bool:
    return name == GPU_RESOURCE or name.startswith(MIG_PREFIX)


def _count(amount: object) -> int:
    try:
        return int(float(str(amount)))
    except ValueError:
        return 1


def _container_gpus(container: Container) -> int:
    return max(sum(_count(v) for v in amounts.values()) for amounts in container.gpu_amounts())


def gpu_request(pod: Mapping[str, object]) -> int:
    """GPUs (whole or MIG slices) the pod holds: containers summed, or the largest init container."""
    spec = Pod(pod).pod_spec
    running = sum(_container_gpus(c) for c in spec.containers)
    init = max((_container_gpus(c) for c in spec.init_containers), default=0)
    return max(running, init)


def uses_gpu(pod: Mapping[str, object]) -> bool:
    """True when any container or init container requests or limits nvidia.com/gpu or nvidia.com/mig-*."""
    spec = Pod(pod).pod_spec
    return any(_container_gpus(c) > 0 for c in (*spec.containers, *spec.init_containers))


def alert_pod(
    labels: Mapping[str, str], target: Target, exporter_pod_prefixes: Sequence[str] = EXPORTER_POD_PREFIXES
) -> tuple[str, str] | None:
    """(namespace, pod) named by the alert; the exported_* forms win (they are the workload's own) and the
    exporter's own pod (dcgm-exporter scraped with honorLabels false) never counts."""
    pod, pod_namespace, _ = workload_pod(labels, exporter_pod_prefixes)
    name = pod or target.pod
    namespace = pod_namespace or target.namespace
    if name and namespace:
        return namespace, name
    return None


def _controller_ref(obj: Mapping[str, object]) -> OwnerReference | None:
    return Body(obj).metadata.controller_reference


OwnerKey = tuple[str, str, str]
OwnerRead = tuple[KubeObject | None, JsonObject]  # (the owner or None, notes for the chain entry naming it)


# How long an owner read serves the chains of later contexts. In a storm the nodes run pods of the same
# ReplicaSets and Deployments (one training job spans many nodes); a chain needs only each owner's uid and
# ownerReferences, and a pod whose reference names another uid (the owner was recreated) reads it again.
OWNER_MAX_AGE = 30.0
_OWNER_MEMO_SIZE = 20_000


class _OwnerMemo:
    """Owners one adapter read in the last OWNER_MAX_AGE seconds, reduced to what a chain reads."""

    def __init__(self) -> None:
        self._entries: OrderedDict[OwnerKey, tuple[float, KubeObject]] = OrderedDict()

    def get(self, key: OwnerKey, uid: object) -> KubeObject | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        at, owner = hit
        if time.monotonic() - at > OWNER_MAX_AGE or (uid and Body(owner).uid != uid):
            del self._entries[key]
            return None
        return owner

    def put(self, key: OwnerKey, owner: KubeObject) -> None:
        meta = owner.get("metadata")
        kept: JsonObject = (
            {k: meta[k] for k in ("name", "namespace", "uid", "ownerReferences") if k in meta}
            if isinstance(meta, dict) else {}
        )
        self._entries[key] = (time.monotonic(), {"kind": owner.get("kind"), "metadata": kept})
        self._entries.move_to_end(key)
        while len(self._entries) > _OWNER_MEMO_SIZE:
            self._entries.popitem(last=False)


_owner_memos: WeakKeyDictionary[KubeAdapter, _OwnerMemo] = WeakKeyDictionary()


async def _fetch_owner(kube: KubeAdapter, namespace: str, ref: OwnerReference) -> OwnerRead:
    key = (namespace, ref.kind, ref.name)
    memo = _owner_memos.setdefault(kube, _OwnerMemo())
    remembered = memo.get(key, ref.uid)
    if remembered is not None:
        return remembered, {}
    try:
        owner = await kube.get_owner(namespace, ref)
    except NotFound:
        return None, {}
    except NotSupported:
        return None, {"unreadable": True}
    except PermanentError as exc:
        return None, {"error": exc.message}
    if ref.uid and Body(owner).uid != ref.uid:
        return None, {}  # same name, different object: the real owner is gone
    memo.put(key, owner)
    return owner, {}


class OwnerReads:
    """The owner reads of one context: each owner read once, the chains of different pods read concurrently.

    `prefetch` walks a pod's chain through these reads; `owner_chain` given the same `OwnerReads` then builds
    the chains in pod order from the finished reads, exactly as if they had been read one after another (the
    first entry naming an unreadable owner carries why; a failed read raises where it would have).
    """

    def __init__(self, kube: KubeAdapter) -> None:
        self.kube = kube
        self._reads: dict[OwnerKey, asyncio.Task[OwnerRead]] = {}

    def read(self, namespace: str, ref: OwnerReference) -> asyncio.Task[OwnerRead]:
        key = (namespace, ref.kind, ref.name)
        task = self._reads.get(key)
        if task is None:
            task = self._reads[key] = asyncio.ensure_future(_fetch_owner(self.kube, namespace, ref))
        return task

    async def prefetch(self, namespace: str, obj: Mapping[str, object]) -> None:
        ref, depth = _controller_ref(obj), 0
        while ref is not None and depth < MAX_OWNER_DEPTH:
            owner, _ = await self.read(namespace, ref)
            if owner is None:
                return
            ref, depth = _controller_ref(owner), depth + 1


async def owner_chain(
    kube: KubeAdapter,
    namespace: str,
    obj: Mapping[str, object],
    cache: dict[OwnerKey, KubeObject | None],
    reads: OwnerReads | None = None,
) -> list[JsonObject]:
    """Pod -> ReplicaSet -> Deployment, Job -> CronJob, ...; a missing or unreadable owner ends the chain."""
    chain: list[JsonObject] = []
    ref = _controller_ref(obj)
    while ref is not None and len(chain) < MAX_OWNER_DEPTH:
        kind, name = ref.kind, ref.name
        entry: JsonObject = {"kind": kind, "name": name}
        chain.append(entry)
        key = (namespace, kind, name)
        if key not in cache:
            owner, notes = await (_fetch_owner(kube, namespace, ref) if reads is None else reads.read(namespace, ref))
            entry.update(notes)
            cache[key] = owner
        owner = cache[key]
        if owner is None:
            entry.setdefault("missing", True)
            return chain
        ref = _controller_ref(owner)
    return chain


def _pod_summary(pod: Mapping[str, object], owners: list[JsonObject], from_alert: bool) -> JsonObject:
    view = Pod(pod)
    return {
        "namespace": view.namespace,
        "name": view.name,
        "uid": view.uid,
        "node": view.node_name,
        "phase": view.phase,
        "gpu_request": gpu_request(pod),
        "owners": list(owners),
        "from_alert": from_alert,
    }


def _node_summary(node: Mapping[str, object]) -> JsonObject:
    view = Node(node)
    labels: JsonObject = {
        k: v for k, v in view.labels.items() if k in NODE_LABEL_KEYS or k.startswith(NODE_LABEL_PREFIXES)
    }
    return {
        "name": view.name,
        "unschedulable": view.unschedulable,
        "taints": [json_object(t.raw) for t in view.taints],
        "labels": labels,
        "internal_ip": view.internal_ip,
        # Recorded at admission: `await_reboot` proves a reboot by a different boot ID before return.
        "boot_id": view.boot_id,
        "ready": view.ready,
    }


def node_ready(node: Mapping[str, object]) -> bool:
    """The node's Ready condition is True (the kubelet reports in and the node takes pods)."""
    return Node(node).ready


def _labels_only(target: Target, named: tuple[str, str] | None) -> JsonObject:
    pods: list[JsonValue] = []
    if named is not None:
        pods.append(
            {
                "namespace": named[0],
                "name": named[1],
                "uid": None,
                "node": target.node,
                "phase": None,
                "gpu_request": 0,
                "owners": [],
                "from_alert": True,
            }
        )
    return {"pods": pods, "pod_source": "alert" if pods else "none", "node": {"name": target.node}}


def exporter_gpu_context(
    context: JsonObject, target: Target, named: tuple[str, str] | None, uuid: str | None
) -> JsonObject:
    """The context when the node's agent could not say which pods hold the GPU, but the alert names the pod
    using it: dcgm-exporter with pod mapping labels each GPU's series with the pod the kubelet gave that GPU
    (`pod`/`namespace`, or `exported_pod`/`exported_namespace` behind honorLabels false) and the shipped
    Xid rules keep them. `pod_source` becomes "exporter"; the named pod is marked with `gpu`, is that GPU's
    only entry in `gpu_pods` (what a `gpu:<uuid>` drain selects) and, for a GPU target, the context's pods
    narrow to it. One pod per alert is all the exporter says: a reset still refuses while any other process
    holds the GPU (the node agent checks every holder). Without a named pod the context is returned as is.
    """
    if named is None:
        return context
    narrow = target.on_gpu
    pods: list[JsonValue] = []
    found: JsonObject | None = None
    for pod in as_list(context.get("pods")):
        entry = as_mapping(pod)
        if found is None and (entry.get("namespace"), entry.get("name")) == named:
            found = {**json_object(entry), "gpu": uuid} if uuid else json_object(entry)
            pods.append(found)
        elif not narrow:
            pods.append(json_value(pod))
    if found is None:  # not read from the API server: the alert's word alone
        found = {"namespace": named[0], "name": named[1], "uid": None, "node": target.node, "phase": None,
                 "gpu_request": 0, "owners": [], "from_alert": True}
        if uuid:
            found["gpu"] = uuid
        pods.insert(0, found)
    result: JsonObject = {**context, "pod_source": "exporter", "pods": pods}
    if uuid:
        on_gpu: JsonObject = {"namespace": named[0], "name": named[1], "uid": found.get("uid"), "active": None}
        result.update(gpu_uuid=uuid, gpu_pods={uuid: [on_gpu]})
    return result


async def _node_info(
    kube: KubeAdapter, name: str | None
) -> tuple[JsonObject, KubeObject | None, list[KubeObject]]:
    if not name:
        return {"name": None}, None, []
    try:
        node = await kube.get_node(name)
    except NotFound:
        return {"name": name, "missing": True}, None, []
    return _node_summary(node), node, await kube.list_pods_on_node(name)


async def _alert_pod_object(
    kube: KubeAdapter, named: tuple[str, str] | None, on_node: list[KubeObject]
) -> KubeObject | None:
    if named is None:
        return None
    for pod in on_node:
        meta = Body(pod).metadata
        if (meta.namespace, meta.name) == named:
            return pod
    try:
        return await kube.get_pod(*named)
    except NotFound:
        return {"metadata": {"namespace": named[0], "name": named[1]}, "missing": True}


@dataclass(frozen=True)
class Gathered:
    """A context as stored (`context`) and the node object it summarises (`node`: the whole object as the
    API server returned it, with its resourceVersion; None without cluster access or when the node is
    missing). The node is not stored: a first step begun with the admission observes the node from it
    instead of reading it again (engine/step_lifecycle.py: StepLifecycle.prepare_first)."""

    context: JsonObject
    node: KubeObject | None = None


async def gather_context(
    kube: KubeAdapter | None, target: Target, labels: Mapping[str, str], settings: Settings
) -> JsonObject:
    """{"pods": [...], "pod_source": "alert+node" | "alert" | "none", "node": {...}} for `target`."""
    return (await gather(kube, target, labels, settings)).context


async def gather(kube: KubeAdapter | None, target: Target, labels: Mapping[str, str], settings: Settings) -> Gathered:
    """`gather_context`, with the node object it read."""
    named = alert_pod(labels, target, settings.exporter_pod_prefixes)
    if kube is None:
        return Gathered(_labels_only(target, named))
    node, node_object, on_node = await _node_info(kube, target.node)
    from_alert = await _alert_pod_object(kube, named, on_node)
    alert_uid = None if from_alert is None else Body(from_alert).uid
    chosen: list[tuple[KubeObject, bool]] = [] if from_alert is None else [(from_alert, True)]
    chosen += [(pod, False) for pod in on_node if uses_gpu(pod) and Body(pod).uid != alert_uid]
    # Read the owners of every pod at once (each owner once), then build the chains in pod order from them.
    reads = OwnerReads(kube)
    await asyncio.gather(
        *(reads.prefetch(_namespace_of(pod), pod) for pod, _ in chosen if not pod.get("missing")),
        return_exceptions=True,  # a failed read raises below, where reading one by one would have raised it
    )
    cache: dict[OwnerKey, KubeObject | None] = {}
    pods: list[JsonValue] = [await _summarise(kube, pod, from_alert, cache, reads) for pod, from_alert in chosen]
    return Gathered({"pods": pods, "pod_source": "alert+node", "node": node}, node_object)


def _namespace_of(pod: Mapping[str, object]) -> str:
    return str(Body(pod).namespace)


async def _summarise(
    kube: KubeAdapter,
    pod: Mapping[str, object],
    from_alert: bool,
    cache: dict[OwnerKey, KubeObject | None],
    reads: OwnerReads,
) -> JsonObject:
    namespace = _namespace_of(pod)
    owners: list[JsonObject] = [] if pod.get("missing") else await owner_chain(kube, namespace, pod, cache, reads)
    summary = _pod_summary(pod, owners, from_alert)
    if pod.get("missing"):
        summary["missing"] = True
    return summary

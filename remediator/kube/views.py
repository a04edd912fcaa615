"""Typed, read-only views over Kubernetes objects as the API client returns them (camelCase JSON).

The controller reads a handful of fields of each object (a node's taints and Ready condition, a pod's node
and GPU requests, an owner reference's kind and uid, a quota's hard limits). Read as `obj.get("metadata",
{}).get(...)` chains, every reader repeats the defaults and trusts the types the server sent. These views say
once where each field lives and what type it has: a field that is absent, null, or of the wrong type (a
hostile or broken object) reads as empty (None, "", (), {}), never raises. kopf's `_cogs/structs/bodies.py`
(`Body` with `.metadata`, `.spec`, `.status`) is the model.

A view wraps the object it was given, copies nothing and never writes; `.raw` is the object itself, for code
that passes it on (a patch built from a taint list keeps the fields the controller does not know). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from remediator.domain.json_values import JsonObject, JsonValue

__all__ = [
    "EMPTY",
    "GPU_RESOURCE",
    "MIG_PREFIX",
    "Body",
    "Container",
    "Meta",
    "Node",
    "NodeTaint",
    "OwnerReference",
    "Pod",
    "PodSpec",
    "ResourceQuota",
    "Scale",
    "StatusCondition",
    "Workload",
    "as_list",
    "as_mapping",
    "as_str",
    "is_gpu_resource",
    "json_object",
    "json_value",
]

GPU_RESOURCE: Final = "nvidia.com/gpu"
MIG_PREFIX: Final = "nvidia.com/mig-"

EMPTY: Final[Mapping[str, object]] = {}


def as_mapping(value: object) -> Mapping[str, object]:
    """`value` when it is a JSON object, else an empty mapping."""
    if isinstance(value, Mapping):
        return value
    return EMPTY


def as_list(value: object) -> list[object]:
    """`value` when it is a JSON array, else an empty list."""
    return value if isinstance(value, list) else []


def as_str(value: object) -> str | None:
    """`value` when it is a string, else None."""
    return value if isinstance(value, str) else None


def _mappings(value: object) -> list[Mapping[str, object]]:
    return [item for item in as_list(value) if isinstance(item, Mapping)]


def _strings(value: object) -> dict[str, str]:
    return {k: v for k, v in as_mapping(value).items() if isinstance(v, str)}


def json_value(value: object) -> JsonValue:
    """`value` as JSON data (a copy of objects and arrays; a value JSON cannot hold becomes its string): for
    writing back, or storing, a part of an object that was read through a view."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return json_object(value)
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    return str(value)


def json_object(value: Mapping[str, object]) -> JsonObject:
    """`json_value` of a JSON object."""
    return {str(k): json_value(v) for k, v in value.items()}


def is_gpu_resource(name: str) -> bool:
    """nvidia.com/gpu or a MIG profile (nvidia.com/mig-1g.10gb, ...)."""
    return name == GPU_RESOURCE or name.startswith(MIG_PREFIX)


class _View:
    """A view over one JSON object; `raw` is that object."""

    __slots__ = ("raw",)

    def __init__(self, raw: object) -> None:
        self.raw: Mapping[str, object] = as_mapping(raw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.raw)!r})"

    def _str(self, key: str) -> str | None:
        return as_str(self.raw.get(key))


class OwnerReference(_View):
    """One entry of metadata.ownerReferences."""

    __slots__ = ()

    @property
    def kind(self) -> str:
        return self._str("kind") or ""

    @property
    def name(self) -> str:
        return self._str("name") or ""

    @property
    def uid(self) -> str | None:
        return self._str("uid")

    @property
    def api_version(self) -> str | None:
        return self._str("apiVersion")

    @property
    def controller(self) -> bool:
        return self.raw.get("controller") is True


class Meta(_View):
    """An object's metadata."""

    __slots__ = ()

    @property
    def name(self) -> str | None:
        return self._str("name")

    @property
    def namespace(self) -> str | None:
        return self._str("namespace")

    @property
    def uid(self) -> str | None:
        return self._str("uid")

    @property
    def resource_version(self) -> str | None:
        return self._str("resourceVersion")

    @property
    def creation_timestamp(self) -> str | None:
        return self._str("creationTimestamp")

    @property
    def deletion_timestamp(self) -> str | None:
        return self._str("deletionTimestamp")

    @property
    def labels(self) -> dict[str, str]:
        """The labels with string values (a copy)."""
        return _strings(self.raw.get("labels"))

    @property
    def annotations(self) -> dict[str, str]:
        """The annotations with string values (a copy)."""
        return _strings(self.raw.get("annotations"))

    @property
    def owner_references(self) -> tuple[OwnerReference, ...]:
        return tuple(OwnerReference(r) for r in _mappings(self.raw.get("ownerReferences")))

    @property
    def controller_reference(self) -> OwnerReference | None:
        """The owner reference marked `controller`, else the first one, else None."""
        refs = self.owner_references
        return next((r for r in refs if r.controller), refs[0] if refs else None)

    @property
    def managed_fields(self) -> list[Mapping[str, object]]:
        return _mappings(self.raw.get("managedFields"))


class Body(_View):
    """Any Kubernetes object: kind, metadata, spec, status."""

    __slots__ = ()

    @property
    def kind(self) -> str | None:
        return self._str("kind")

    @property
    def api_version(self) -> str | None:
        return self._str("apiVersion")

    @property
    def metadata(self) -> Meta:
        return Meta(self.raw.get("metadata"))

    @property
    def spec(self) -> Mapping[str, object]:
        return as_mapping(self.raw.get("spec"))

    @property
    def status(self) -> Mapping[str, object]:
        return as_mapping(self.raw.get("status"))

    @property
    def name(self) -> str | None:
        return self.metadata.name

    @property
    def namespace(self) -> str | None:
        return self.metadata.namespace

    @property
    def uid(self) -> str | None:
        return self.metadata.uid

    @property
    def resource_version(self) -> str | None:
        return self.metadata.resource_version

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.annotations

    @property
    def conditions(self) -> tuple[StatusCondition, ...]:
        """status.conditions (nodes, pods and most workloads carry them)."""
        return tuple(StatusCondition(c) for c in _mappings(self.status.get("conditions")))

    def condition(self, kind: str) -> StatusCondition | None:
        """The condition of type `kind`, or None."""
        return next((c for c in self.conditions if c.type == kind), None)


class StatusCondition(_View):
    """One entry of status.conditions."""

    __slots__ = ()

    @property
    def type(self) -> str | None:
        return self._str("type")

    @property
    def status(self) -> str | None:
        """"True", "False" or "Unknown" (a string, as the API spells it)."""
        return self._str("status")

    @property
    def reason(self) -> str | None:
        return self._str("reason")

    @property
    def message(self) -> str | None:
        return self._str("message")

    @property
    def last_transition_time(self) -> str | None:
        return self._str("lastTransitionTime")

    @property
    def is_true(self) -> bool:
        return self.status == "True"


class NodeTaint(_View):
    """One entry of a node's spec.taints."""

    __slots__ = ()

    @property
    def key(self) -> str | None:
        return self._str("key")

    @property
    def value(self) -> str | None:
        return self._str("value")

    @property
    def effect(self) -> str | None:
        return self._str("effect")

    @property
    def time_added(self) -> str | None:
        return self._str("timeAdded")


class Node(Body):
    """A core/v1 Node."""

    __slots__ = ()

    @property
    def unschedulable(self) -> bool:
        """spec.unschedulable (cordoned); any truthy value counts, as the API server's own defaulting does."""
        return bool(self.spec.get("unschedulable"))

    @property
    def taints(self) -> tuple[NodeTaint, ...]:
        return tuple(NodeTaint(t) for t in _mappings(self.spec.get("taints")))

    @property
    def ready(self) -> bool:
        """The Ready condition is True (the kubelet reports in and the node takes pods)."""
        return any(c.type == "Ready" and c.is_true for c in self.conditions)

    @property
    def addresses(self) -> tuple[tuple[str | None, str | None], ...]:
        """status.addresses as (type, address)."""
        return tuple((as_str(a.get("type")), as_str(a.get("address"))) for a in _mappings(self.status.get("addresses")))

    @property
    def internal_ip(self) -> str | None:
        return next((address for kind, address in self.addresses if kind == "InternalIP"), None)

    @property
    def node_info(self) -> Mapping[str, object]:
        return as_mapping(self.status.get("nodeInfo"))

    @property
    def boot_id(self) -> str | None:
        return as_str(self.node_info.get("bootID"))

    @property
    def allocatable(self) -> Mapping[str, object]:
        return as_mapping(self.status.get("allocatable"))

    @property
    def capacity(self) -> Mapping[str, object]:
        return as_mapping(self.status.get("capacity"))

    @property
    def allocatable_gpus(self) -> Mapping[str, object]:
        """The GPU resources (whole and MIG) of status.allocatable, amounts as the API spells them."""
        return {k: v for k, v in self.allocatable.items() if is_gpu_resource(k)}

    @property
    def capacity_gpus(self) -> Mapping[str, object]:
        return {k: v for k, v in self.capacity.items() if is_gpu_resource(k)}


class Container(_View):
    """One container (or init container) of a pod spec."""

    __slots__ = ()

    @property
    def name(self) -> str | None:
        return self._str("name")

    @property
    def resources(self) -> Mapping[str, object]:
        return as_mapping(self.raw.get("resources"))

    @property
    def requests(self) -> Mapping[str, object]:
        return as_mapping(self.resources.get("requests"))

    @property
    def limits(self) -> Mapping[str, object]:
        return as_mapping(self.resources.get("limits"))

    def gpu_amounts(self) -> list[dict[str, object]]:
        """The GPU resources of requests, then of limits, amounts as the API spells them."""
        return [{k: v for k, v in source.items() if is_gpu_resource(k)} for source in (self.requests, self.limits)]


class PodSpec(_View):
    """A pod's spec, or the pod template's spec of a workload."""

    __slots__ = ()

    @property
    def node_name(self) -> str | None:
        return self._str("nodeName")

    @property
    def containers(self) -> tuple[Container, ...]:
        return tuple(Container(c) for c in _mappings(self.raw.get("containers")))

    @property
    def init_containers(self) -> tuple[Container, ...]:
        return tuple(Container(c) for c in _mappings(self.raw.get("initContainers")))

    @property
    def node_selector(self) -> dict[str, str]:
        return _strings(self.raw.get("nodeSelector"))

    @property
    def termination_grace_period_seconds(self) -> int | None:
        value = self.raw.get("terminationGracePeriodSeconds")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


class Pod(Body):
    """A core/v1 Pod."""

    __slots__ = ()

    @property
    def pod_spec(self) -> PodSpec:
        return PodSpec(self.spec)

    @property
    def node_name(self) -> str | None:
        return self.pod_spec.node_name

    @property
    def phase(self) -> str | None:
        return as_str(self.status.get("phase"))

    @property
    def deletion_timestamp(self) -> str | None:
        return self.metadata.deletion_timestamp

    @property
    def owner_references(self) -> tuple[OwnerReference, ...]:
        return self.metadata.owner_references

    @property
    def ready(self) -> bool:
        """The pod's Ready condition is True."""
        return any(c.type == "Ready" and c.is_true for c in self.conditions)


class Workload(Body):
    """A Deployment, StatefulSet, ReplicaSet or Job: the fields the controller reads to scale or suspend it."""

    __slots__ = ()

    @property
    def template_spec(self) -> PodSpec:
        """spec.template.spec: the pods it makes."""
        return PodSpec(as_mapping(self.spec.get("template")).get("spec"))

    @property
    def suspend(self) -> object:
        """A Job's spec.suspend as sent (True, False or absent: None)."""
        return self.spec.get("suspend")

    @property
    def parallelism(self) -> object:
        return self.spec.get("parallelism")

    @property
    def active(self) -> object:
        """A Job's status.active as sent."""
        return self.status.get("active")


class Scale(Body):
    """An autoscaling/v1 Scale (the `scale` subresource)."""

    __slots__ = ()

    @property
    def replicas(self) -> object:
        """spec.replicas as sent (absent: None)."""
        return self.spec.get("replicas")


class ResourceQuota(Body):
    """A core/v1 ResourceQuota."""

    __slots__ = ()

    @property
    def hard(self) -> Mapping[str, object]:
        return as_mapping(self.spec.get("hard"))

    @property
    def used(self) -> Mapping[str, object]:
        return as_mapping(self.status.get("used"))

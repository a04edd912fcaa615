"""Every Kubernetes kind the controller calls, with the verbs it uses on each: the one table of them.

Three things read it and nothing else lists kinds or verbs: the Kubernetes adapter
(`adapters/kube.py`) builds each request from an `Operation` of this table and knows from it whether the
request writes (and so is audited); `deploy/render_definitions.py` writes the controller's RBAC
(`deploy/base/rbac.yaml`) from it, granting exactly these verbs; the strict fake API server under
`tests/fakekube` serves these kinds and, given these grants, answers 403 to anything else, as a real
cluster would. A verb the adapter uses that the table does not list fails where the adapter is defined.

Pure: names and small records, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final
from urllib.parse import quote

__all__ = [
    "KINDS",
    "NAMESPACE_ROLE_GRANTS",
    "UNCALLED_CLUSTER_GRANTS",
    "Grant",
    "Kind",
    "Operation",
    "Verb",
    "cluster_grants",
    "kind",
    "namespace_grants",
    "operation",
]


class Verb(StrEnum):
    """The RBAC verbs the controller uses (a watch is a GET with `watch=true`, a list a GET on a collection)."""

    GET = "get"
    LIST = "list"
    WATCH = "watch"
    CREATE = "create"
    PATCH = "patch"
    UPDATE = "update"

    @property
    def writes(self) -> bool:
        return self in (Verb.CREATE, Verb.PATCH, Verb.UPDATE)

    @property
    def method(self) -> str:
        """The HTTP method of this verb."""
        return _METHODS[self]


_METHODS: Final = {
    Verb.GET: "GET",
    Verb.LIST: "GET",
    Verb.WATCH: "GET",
    Verb.CREATE: "POST",
    Verb.PATCH: "PATCH",
    Verb.UPDATE: "PUT",
}

Grant = tuple[str, str, str]
"""(API group, resource, verb) as a Role's rule grants it; the resource of a subresource is `plural/sub`."""


@dataclass(frozen=True)
class Kind:
    """One kind: where the API serves it and the verbs the controller uses on it and its subresources."""

    kind: str
    group: str  # "" is the core group
    version: str
    plural: str
    namespaced: bool
    verbs: frozenset[Verb]
    subresources: Mapping[str, frozenset[Verb]] = field(default_factory=dict)
    singular: str = ""  # how audit events name the object ("resource_quota"); defaults to the kind, lower case

    @property
    def api_version(self) -> str:
        return self.version if self.group == "" else f"{self.group}/{self.version}"

    @property
    def audit_name(self) -> str:
        return self.singular or self.kind.lower()

    def grants(self) -> list[Grant]:
        out = [(self.group, self.plural, verb.value) for verb in Verb if verb in self.verbs]
        for sub, verbs in self.subresources.items():
            out.extend((self.group, f"{self.plural}/{sub}", verb.value) for verb in Verb if verb in verbs)
        return out


def _kind(
    kind: str,
    group: str,
    plural: str,
    verbs: Iterable[Verb],
    *,
    namespaced: bool = True,
    version: str = "v1",
    subresources: Mapping[str, Iterable[Verb]] | None = None,
    singular: str = "",
) -> Kind:
    return Kind(
        kind=kind,
        group=group,
        version=version,
        plural=plural,
        namespaced=namespaced,
        verbs=frozenset(verbs),
        subresources={sub: frozenset(v) for sub, v in (subresources or {}).items()},
        singular=singular,
    )


G, L, W, C, P = Verb.GET, Verb.LIST, Verb.WATCH, Verb.CREATE, Verb.PATCH

KINDS: Final[tuple[Kind, ...]] = (
    # quarantine (cordon, taints, labels), the GPUHealthy condition, the inventory's list and watch
    _kind("Node", "", "nodes", (G, L, W, P), namespaced=False, subresources={"status": (P,)}),
    # context and drain (pods on a node, through the Eviction API so PodDisruptionBudgets hold), idle annotation
    _kind("Pod", "", "pods", (G, L, P), subresources={"eviction": (C,)}),
    _kind("ResourceQuota", "", "resourcequotas", (G, L, P), singular="resource_quota"),
    _kind("Namespace", "", "namespaces", (G,), namespaced=False),  # the opt-out label
    _kind("Event", "", "events", (C,)),
    # owners of a pod, read for the context
    _kind("ReplicationController", "", "replicationcontrollers", (G,), singular="replication_controller"),
    _kind("Deployment", "apps", "deployments", (G,), subresources={"scale": (G, P)}),
    _kind("StatefulSet", "apps", "statefulsets", (G,), subresources={"scale": (G, P)}, singular="stateful_set"),
    _kind("ReplicaSet", "apps", "replicasets", (G,), singular="replica_set"),
    _kind("DaemonSet", "apps", "daemonsets", (G,), singular="daemon_set"),
    _kind("Job", "batch", "jobs", (G, P)),  # spec.suspend
    _kind("CronJob", "batch", "cronjobs", (G,), singular="cron_job"),
)

# Granted by the manifests but called by nothing in the controller today; listed here so that the RBAC
# still grants exactly this module's contents.
UNCALLED_CLUSTER_GRANTS: Final[tuple[Grant, ...]] = (("events.k8s.io", "events", "create"),)
NAMESPACE_ROLE_GRANTS: Final[tuple[Grant, ...]] = tuple(
    ("coordination.k8s.io", "leases", verb) for verb in ("get", "create", "update")
)
"""The Role in the controller's own namespace (`gpu-remediator-leases`); nothing calls these either."""

_BY_KIND: Final = {k.kind: k for k in KINDS}


def kind(name: str) -> Kind:
    """The table's entry for a kind; LookupError when the controller does not use it."""
    try:
        return _BY_KIND[name]
    except KeyError:
        raise LookupError(f"the controller uses no {name} objects") from None


def cluster_grants() -> list[Grant]:
    """What the ClusterRole grants: every verb of the table, in its order, then the uncalled grants."""
    return [grant for k in KINDS for grant in k.grants()] + list(UNCALLED_CLUSTER_GRANTS)


def namespace_grants() -> list[Grant]:
    return list(NAMESPACE_ROLE_GRANTS)


@dataclass(frozen=True)
class Operation:
    """One verb on one kind (or one of its subresources): everything a request needs but names and body."""

    kind: Kind
    verb: Verb
    subresource: str | None = None

    @property
    def writes(self) -> bool:
        return self.verb.writes

    @property
    def resource(self) -> str:
        """The resource as RBAC names it: `nodes`, `nodes/status`, `pods/eviction`."""
        return self.kind.plural if self.subresource is None else f"{self.kind.plural}/{self.subresource}"

    @property
    def audit_name(self) -> str:
        """How audit events name what was written: `node`, `node_status`, `pod_eviction`, `deployment_scale`."""
        base = self.kind.audit_name
        return base if self.subresource is None else f"{base}_{self.subresource}"

    @property
    def grant(self) -> Grant:
        return (self.kind.group, self.resource, self.verb.value)

    def path(self, *, name: str | None = None, namespace: str | None = None) -> str:
        """The URL path: a collection without `name` (list, watch, create), else the object or subresource.

        A namespaced kind without `namespace` is its collection across all namespaces (list and watch only).
        """
        k = self.kind
        base = "/api/v1" if k.group == "" else f"/apis/{k.group}/{k.version}"
        if k.namespaced and namespace is not None:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{k.plural}"
        if name is None:
            return base
        base += f"/{quote(name, safe='')}"
        return base if self.subresource is None else f"{base}/{self.subresource}"


def operation(kind_name: str, verb: Verb, subresource: str | None = None) -> Operation:
    """The table's operation; LookupError when the table does not list that verb on that kind/subresource."""
    k = kind(kind_name)
    allowed = k.verbs if subresource is None else k.subresources.get(subresource, frozenset())
    if verb not in allowed:
        where = k.plural if subresource is None else f"{k.plural}/{subresource}"
        raise LookupError(f"the controller's kind table does not grant {verb.value} on {where}")
    return Operation(k, verb, subresource)

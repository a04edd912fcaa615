"""Shared-cause analysis: when many nodes fault at once, which attributes do the faulting nodes share?

Fleets rarely lose many GPUs at once by chance: a driver or firmware rollout, one rack's power, one switch,
one image, one tenant's job. Given the nodes that faulted in the last window and the fleet's attribute
counts, this ranks every attribute the faulting nodes carry by how unlikely their share is if the faulting
nodes had been drawn from the fleet at random: an exact one-sided hypergeometric test (log-factorials via
`math.lgamma`), Bonferroni-corrected over the candidates tested. An attribute every node carries has p = 1
and can never be a cause.

Node attributes (`node_attributes`): every label (a label whose values are all distinct across the fleet,
such as the hostname, is left out when the candidates are tested), nodeInfo's kubelet, kernel, OS image and
container runtime versions, and the creation and last-Ready times bucketed (6 h by default: a rollout that
replaced or rebooted nodes shows as one bucket). `FleetCounts` keeps their counts incrementally as the node
watch reports changes, so an evaluation never walks the fleet. Fault attributes (alert name, Xid code, the workloads
that ran on the node, the agent's driver/VBIOS readings) are known only for faulting nodes: they are
reported with their coverage but never tested or held on, since the fleet's share is unknown.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from remediator.domain.json_values import JsonObject
from remediator.kube.views import Node, as_list, as_mapping

__all__ = [
    "HOSTNAME_LABEL", "Candidate", "Fault", "FleetCounts", "StormAnalysis", "StormPolicy", "StormState", "analyse",
    "attribute_text", "fault_attributes", "hypergeom_sf", "node_attributes", "nodes_phrase",
]

HOSTNAME_LABEL = "kubernetes.io/hostname"
LABEL = "label:"  # attribute keys: "label:<key>", "node:<field>", "fault:<field>"
_NODE_INFO = (
    ("kubeletVersion", "node:kubelet"), ("kernelVersion", "node:kernel"), ("osImage", "node:os"),
    ("containerRuntimeVersion", "node:runtime"),
)
_SKIP_LABELS = frozenset({HOSTNAME_LABEL})
# Alert labels the agent and dcgm-exporter carry for the driver and VBIOS they read.
_READING_LABELS = (
    ("driver_version", "fault:driver"), ("DCGM_FI_DRIVER_VERSION", "fault:driver"),
    ("vbios_version", "fault:vbios"), ("DCGM_FI_DEV_VBIOS_VERSION", "fault:vbios"),
)

Attribute = tuple[str, str]


def _bucket(stamp: object, hours: int) -> str | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at.replace(hour=at.hour - at.hour % hours, minute=0, second=0, microsecond=0).isoformat()


def node_attributes(node: Mapping[str, object], *, created_bucket_hours: int = 6) -> frozenset[Attribute]:
    """The attributes of a Node object that the fleet's counts and the storm analysis compare."""
    view = Node(node)
    out: set[Attribute] = {(f"{LABEL}{k}", v) for k, v in view.labels.items() if k not in _SKIP_LABELS}
    info = as_mapping(view.status.get("nodeInfo"))
    out.update((key, str(info[name])) for name, key in _NODE_INFO if info.get(name))
    created = _bucket(view.metadata.creation_timestamp, created_bucket_hours)
    if created:
        out.add(("node:created", created))
    ready = next((c.last_transition_time for c in view.conditions if c.type == "Ready" and c.is_true), None)
    since = _bucket(ready, created_bucket_hours)
    if since:
        out.add(("node:ready-since", since))
    return frozenset(out)


def fault_attributes(
    alertname: str, xid: int | None, labels: Mapping[str, object], context: Mapping[str, object] | None
) -> frozenset[Attribute]:
    """What one fault says about its node beyond the node object: alert, Xid, agent readings, workloads."""
    out: set[Attribute] = {("fault:alertname", alertname)}
    if xid is not None:
        out.add(("fault:xid", str(xid)))
    out.update((key, str(labels[name])) for name, key in _READING_LABELS if labels.get(name))
    for pod in as_list((context or {}).get("pods")):
        if not isinstance(pod, Mapping):
            continue
        if pod.get("namespace"):
            out.add(("fault:namespace", str(pod["namespace"])))
        for owner in as_list(pod.get("owners")):
            if isinstance(owner, Mapping) and owner.get("kind") and owner.get("name"):
                out.add(("fault:workload", f"{pod.get('namespace')}/{owner['kind']}/{owner['name']}"))
    return frozenset(out)


class FleetCounts:
    """How many nodes carry each attribute, kept as nodes come, change and go (O(attributes) per change)."""

    def __init__(self) -> None:
        self._nodes: dict[str, frozenset[Attribute]] = {}
        self.counts: Counter[Attribute] = Counter()
        self._key_nodes: Counter[str] = Counter()
        self._key_values: Counter[str] = Counter()
        self.version = 0  # moves on every change (the storm guard recomputes its analysis when it moves)

    @property
    def size(self) -> int:
        return len(self._nodes)

    def attributes(self, name: str) -> frozenset[Attribute] | None:
        return self._nodes.get(name)

    def set(self, name: str, attrs: frozenset[Attribute] | None) -> None:
        """The node's attributes now (None: it is gone)."""
        old = self._nodes.get(name)
        if old == attrs:
            return
        self.version += 1
        for attr in old or ():
            self.counts[attr] -= 1
            self._key_nodes[attr[0]] -= 1
            if self.counts[attr] == 0:
                del self.counts[attr]
                self._key_values[attr[0]] -= 1
        for attr in attrs or ():
            if self.counts[attr] == 0:
                self._key_values[attr[0]] += 1
            self.counts[attr] += 1
            self._key_nodes[attr[0]] += 1
        if attrs is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = attrs

    def replace(self, nodes: Mapping[str, frozenset[Attribute]]) -> None:
        """The fleet as a fresh list has it: nodes not in it are gone."""
        for name in set(self._nodes) - set(nodes):
            self.set(name, None)
        for name, attrs in nodes.items():
            self.set(name, attrs)

    def unique_per_node(self, key: str) -> bool:
        """Every node that carries this key has its own value (a hostname, a serial number)."""
        return self._key_nodes[key] > 1 and self._key_values[key] == self._key_nodes[key]


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def hypergeom_sf(x: int, population: int, successes: int, draws: int) -> float:
    """P(X >= x) for X ~ Hypergeometric(N=population, K=successes, n=draws), exact (summed in log space)."""
    if not 0 <= successes <= population or not 0 <= draws <= population:
        raise ValueError(f"bad hypergeometric parameters N={population} K={successes} n={draws}")
    low, high = max(x, 0, draws - (population - successes)), min(successes, draws)
    if low > high:
        return 0.0
    if low <= max(0, draws - (population - successes)):
        return 1.0  # every possible draw has at least x
    total = _log_comb(population, draws)
    terms = [_log_comb(successes, i) + _log_comb(population - successes, draws - i) - total
             for i in range(low, high + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


class StormState(StrEnum):
    """A storm's state (store/storm_store.py keeps it): `open` holds its cause's nodes for one group decision,
    `approved` or `rejected` once a person decided, `closed` once no node sharing the cause faulted for a window.
    Members compare equal to their stored strings."""

    OPEN = "open"
    APPROVED = "approved"
    REJECTED = "rejected"
    CLOSED = "closed"


@dataclass(frozen=True)
class StormPolicy:
    """The settings the analysis reads (remediator/settings.py names them storm_*)."""

    min_nodes: int = 3  # the storm is analysed when more nodes than this faulted in the window
    hold_nodes: int = 5  # a candidate must explain at least this many faulting nodes to hold
    p_value: float = 1e-6  # ... with a Bonferroni-corrected p-value under this
    top: int = 5


@dataclass(frozen=True)
class Fault:
    """One faulting node of the window, with the attributes of its faults (alert names, Xids, workloads)."""

    node: str
    attributes: frozenset[Attribute] = frozenset()
    at: datetime | None = None


@dataclass(frozen=True)
class Candidate:
    key: str
    value: str
    faulting: int  # faulting nodes that carry it
    faulting_total: int
    fleet: int | None  # fleet nodes that carry it (None: a fault attribute, the fleet's share is unknown)
    fleet_total: int
    p_value: float | None  # Bonferroni-corrected; None for fault attributes
    lift: float | None
    nodes: tuple[str, ...] = ()

    @property
    def holds(self) -> bool:
        return self.p_value is not None

    def text(self) -> str:
        """'14 of 15 faulting nodes have label nvidia.com/...=580.95.05; 22% of the fleet does'."""
        head = f"{self.faulting} of {self.faulting_total} faulting nodes {attribute_text(self.key, self.value)}"
        if self.fleet is None or not self.fleet_total:
            return f"{head} (fleet share unknown)"
        share = 100.0 * self.fleet / self.fleet_total
        return f"{head}; {share:.3g}% of the fleet does (p={self.p_value:.2g}, lift {self.lift:.3g})"

    def as_dict(self) -> JsonObject:
        return {"key": self.key, "value": self.value, "faulting": self.faulting,
                "faulting_total": self.faulting_total, "fleet": self.fleet, "fleet_total": self.fleet_total,
                "p_value": self.p_value, "lift": self.lift, "nodes": [*self.nodes], "text": self.text()}


def attribute_text(key: str, value: str) -> str:
    if key.startswith(LABEL):
        return f"carry label {key[len(LABEL):]}={value}"
    kind, _, name = key.partition(":")
    words = {"kubelet": "run kubelet", "kernel": "run kernel", "os": "run OS image", "runtime": "run runtime",
             "created": "were created in the hours from",
             "ready-since": "became Ready (rebooted) in the hours from", "alertname": "fired alert",
             "xid": "reported Xid",
             "driver": "report driver", "vbios": "report VBIOS", "namespace": "ran pods of namespace",
             "workload": "ran workload"}
    return f"{words.get(name, f'have {kind} {name}')} {value}"


# Labels whose meaning is known (GPU Feature Discovery, the well-known topology labels): said in words.
_LABEL_WORDS = {
    "nvidia.com/cuda.driver-version.full": "running driver", "nvidia.com/cuda.driver.full": "running driver",
    "nvidia.com/gpu.product": "with GPU", "nvidia.com/gpu.family": "with GPU family",
    "nvidia.com/cuda.runtime-version.full": "with CUDA runtime", "topology.kubernetes.io/zone": "in zone",
    "topology.kubernetes.io/region": "in region", "node.kubernetes.io/instance-type": "of instance type",
}


def nodes_phrase(key: str, value: str) -> str:
    """The nodes that share an attribute, in words: 'nodes running driver 580.95.05', 'nodes labelled rack=r12'."""
    if key.startswith(LABEL):
        label = key[len(LABEL):]
        words = _LABEL_WORDS.get(label)
        return f"nodes {words} {value}" if words else f"nodes labelled {label}={value}"
    kind, _, name = key.partition(":")
    said = {"kubelet": "running kubelet", "kernel": "running kernel", "os": "running OS image",
            "runtime": "running container runtime", "created": "created in the hours from",
            "ready-since": "Ready (rebooted) since the hours from"}
    return f"nodes {said.get(name, f'with {kind} {name}')} {value}"


@dataclass(frozen=True)
class StormAnalysis:
    nodes: tuple[str, ...]
    candidates: tuple[Candidate, ...]  # tested ones first, most significant first; then fault attributes
    tested: int
    cause: Candidate | None = None  # the top candidate when it passes the hold thresholds
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> JsonObject:
        return {"nodes": [*self.nodes], "tested": self.tested,
                "cause": None if self.cause is None else self.cause.as_dict(),
                "candidates": [c.as_dict() for c in self.candidates], "notes": [*self.notes]}


def analyse(faults: Sequence[Fault], fleet: FleetCounts, policy: StormPolicy) -> StormAnalysis | None:
    """The shared-cause candidates of the window's faults; None when too few nodes faulted to speak of a storm.

    Node attributes come from `fleet` (the inventory's view of the node); a faulting node the inventory does not
    know is counted with the fault attributes only. A candidate's p-value is the chance that at least that many
    of the n faulting nodes carry it if n nodes were drawn from the fleet at random, times the number tested.
    """
    by_node: dict[str, set[Attribute]] = {}
    for fault in faults:
        by_node.setdefault(fault.node, set()).update(fault.attributes)
    nodes = tuple(sorted(by_node))
    if len(nodes) <= policy.min_nodes:
        return None
    node_attrs: dict[str, frozenset[Attribute]] = {n: fleet.attributes(n) or frozenset() for n in nodes}
    known = [n for n in nodes if fleet.attributes(n) is not None]
    carriers: dict[Attribute, list[str]] = {}
    for node in nodes:
        for attr in node_attrs[node] | by_node[node]:
            carriers.setdefault(attr, []).append(node)
    population, draws = fleet.size, len(known)
    tested_attrs = [
        a for a in carriers
        if not a[0].startswith("fault:") and not fleet.unique_per_node(a[0]) and a in fleet.counts
    ]
    tested = len(tested_attrs)
    ranked: list[Candidate] = []
    for attr in tested_attrs:
        hits = len(carriers[attr])
        k = fleet.counts[attr]
        raw = hypergeom_sf(hits, population, k, draws) if draws else 1.0
        ranked.append(Candidate(
            attr[0], attr[1], hits, draws, k, population, min(1.0, raw * tested),
            (hits / draws) / (k / population) if draws and k else None, tuple(carriers[attr]),
        ))
    ranked.sort(key=lambda c: (c.p_value or 1.0, -(c.lift or 0.0), -c.faulting, c.key, c.value))
    described = sorted(
        (Candidate(a[0], a[1], len(n), len(nodes), None, population, None, None, tuple(n))
         for a, n in carriers.items() if a[0].startswith("fault:")),
        key=lambda c: (-c.faulting, c.key, c.value),
    )
    top = ranked[0] if ranked else None
    cause = top if top is not None and top.faulting >= policy.hold_nodes and (top.p_value or 1.0) < policy.p_value \
        else None
    notes = () if len(known) == len(nodes) else (
        f"{len(nodes) - len(known)} faulting node(s) unknown to the node inventory: fault attributes only",)
    return StormAnalysis(nodes, tuple(ranked[: policy.top] + described[: policy.top]), tested, cause, notes)


def fleet_of(nodes: Iterable[Mapping[str, object]]) -> FleetCounts:
    """FleetCounts of a list of Node objects (tests, the simulation)."""
    fleet = FleetCounts()
    for node in nodes:
        fleet.set(Node(node).name or "", node_attributes(node))
    return fleet

"""Label normalisation: an Alertmanager alert's labels -> GpuAlert, the one shape the engine reads.

dcgm-exporter names things its own way (`Hostname`, `UUID`, `gpu`, `modelName`, `pci_bus_id`; its main
branch says `hostname`) and Prometheus renames target labels to `exported_*` when honor_labels is off: then
`pod`/`namespace` name the exporter itself, which is never taken for the workload (`workload_pod`).
A node name must be an RFC 1123 subdomain (what the API server accepts): any other value leaves the alert
without a node, with `node_problem` saying why, so it never becomes part of an API path.
Everything that varies between installations (which label names the node, which alertname is which kind,
the exporter's pod names) is an input, not a constant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal, get_args

from remediator.domain.json_values import JsonObject
from remediator.kube.object_names import object_name_problem

__all__ = [
    "ALERT_FIELDS", "ALERT_KINDS", "EXPORTER_POD_PREFIXES", "AlertKind", "GpuAlert", "normalize", "parse_xid",
    "workload_pod",
]

# What an alert is about, by its alertname (the rules' alert-kinds.yaml maps names to kinds); rules match on it.
AlertKind = Literal["xid", "ecc_dbe", "ecc_sbe", "thermal", "power", "idle", "other"]
ALERT_KINDS: tuple[AlertKind, ...] = get_args(AlertKind)

# dcgm-exporter's pod names (GPU operator: nvidia-dcgm-exporter-<hash>; its Helm chart: dcgm-exporter-<hash>).
EXPORTER_POD_PREFIXES: tuple[str, ...] = ("nvidia-dcgm-exporter-", "dcgm-exporter-")

_PORT = re.compile(r"^(?P<host>\[[^\]]+\]|[^:]+)(?::\d+)?$")
_INT = re.compile(r"^\s*(\d{1,5})(?:\.0+)?\s*$")


@dataclass(frozen=True)
class GpuAlert:
    """What the engine needs to know about one alert, independent of exporter naming."""

    alertname: str
    status: str
    fingerprint: str
    kind: str
    node: str | None
    node_source: str | None
    gpu_uuid: str | None = None
    gpu_index: str | None = None
    pci_bus_id: str | None = None
    model: str | None = None
    device: str | None = None
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None
    xid: int | None = None
    starts_at: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_problem: str | None = None

    def as_json(self) -> JsonObject:
        """The alert as a remediation's plan stores it: what `dataclasses.asdict` gives, without its generic
        deep copy (every field is a string, a number or None but the two label maps, copied here). A storm
        stores one per remediation, and `asdict` was ~85 us of each alert's decision."""
        stored: JsonObject = {name: getattr(self, name) for name in ALERT_FIELDS}
        stored["labels"] = {**self.labels}
        stored["annotations"] = {**self.annotations}
        return stored


ALERT_FIELDS = tuple(f.name for f in fields(GpuAlert))  # what a plan stores of an alert, in order


def _first(labels: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None


def _strip_port(value: str) -> str:
    m = _PORT.match(value)
    host = m.group("host") if m else value
    return host.strip("[]")


def parse_xid(labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None:
    """Xid code from the `xid` label, else from the `value` annotation (dcgm gauge holds the last Xid)."""
    for raw in (labels.get("xid"), annotations.get("value"), annotations.get("xid")):
        if raw:
            m = _INT.match(raw)
            if m:
                return int(m.group(1))
    return None


def workload_pod(
    labels: Mapping[str, str], exporter_pod_prefixes: Sequence[str] = EXPORTER_POD_PREFIXES
) -> tuple[str | None, str | None, str | None]:
    """(pod, namespace, container) of the workload an alert names: the `exported_*` labels when present,
    else `pod`/`namespace`/`container` unless the pod is the exporter's own; (None, None, None) otherwise."""
    if labels.get("exported_pod"):
        return (labels["exported_pod"], _first(labels, "exported_namespace"), _first(labels, "exported_container"))
    pod = labels.get("pod")
    if not pod or pod.startswith(tuple(exporter_pod_prefixes)):
        return None, None, None
    return pod, _first(labels, "namespace"), _first(labels, "container")


def normalize(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    *,
    status: str,
    fingerprint: str,
    kinds: Mapping[str, str],
    node_precedence: Sequence[str],
    nodes_by_ip: Mapping[str, str] | None = None,
    starts_at: str = "",
    exporter_pod_prefixes: Sequence[str] = EXPORTER_POD_PREFIXES,
) -> GpuAlert:
    """Build the GpuAlert. `kinds` maps alertname -> kind (from the rules); `nodes_by_ip` resolves IPs."""
    alertname = labels.get("alertname", "")
    kind = kinds.get(alertname, "other")
    if kind not in ALERT_KINDS:
        kind = "other"
    node: str | None = None
    node_source: str | None = None
    for name in node_precedence:
        value = labels.get(name)
        if not value:
            continue
        node_source = name
        node = _strip_port(value) if name == "instance" else value
        if nodes_by_ip and node in nodes_by_ip:
            node = nodes_by_ip[node]
        break
    node, node_problem = _valid_node(node, node_source)
    xid = parse_xid(labels, annotations)
    pod, namespace, container = workload_pod(labels, exporter_pod_prefixes)
    if kind == "other" and xid is not None and "xid" in labels:
        kind = "xid"
    return GpuAlert(
        alertname=alertname,
        status=status,
        fingerprint=fingerprint,
        kind=kind,
        node=node,
        node_source=node_source,
        gpu_uuid=_first(labels, "UUID", "uuid", "gpu_uuid"),
        gpu_index=_first(labels, "gpu", "gpu_index", "minor_number"),
        pci_bus_id=_first(labels, "pci_bus_id"),
        model=_first(labels, "modelName", "model"),
        device=_first(labels, "device"),
        pod=pod,
        namespace=namespace,
        container=container,
        xid=xid,
        starts_at=starts_at,
        labels=dict(labels),
        annotations=dict(annotations),
        node_problem=node_problem,
    )


def _valid_node(node: str | None, source: str | None) -> tuple[str | None, str | None]:
    """(node, None) for a valid node name; (None, why) for a value the API server would refuse."""
    if node is None:
        return None, None
    problem = object_name_problem(node, "node name")
    if problem is None:
        return node, None
    return None, f"label {source}: {problem}"

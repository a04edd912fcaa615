"""Plain-dict builders for the objects tests put into the fake cluster (nodes, pods, workloads, PDBs).

Nodes only ever get loopback InternalIPs (127.0.0.N): the controller dials a node's sidecar at that
address, and tests must never send traffic outside 127.0.0.0/8.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = [
    "daemonset_body",
    "deployment_body",
    "job_body",
    "node_body",
    "owner_ref",
    "pdb_body",
    "pod_body",
    "replicaset_body",
    "statefulset_body",
]

API_VERSIONS = {
    "Node": "v1",
    "Pod": "v1",
    "Namespace": "v1",
    "ResourceQuota": "v1",
    "ReplicationController": "v1",
    "ReplicaSet": "apps/v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "PodDisruptionBudget": "policy/v1",
}


def owner_ref(owner: Mapping[str, Any], *, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": owner.get("apiVersion") or API_VERSIONS[owner["kind"]],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def check_loopback(ip: str) -> str:
    if ipaddress.ip_address(ip) not in ipaddress.ip_network("127.0.0.0/8"):
        raise ValueError(f"fake nodes take loopback InternalIPs (127.0.0.N) only, not {ip}")
    return ip


def node_body(
    name: str,
    ip: str,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
    gpus: int = 8,
    ready: bool = True,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": check_loopback(ip)},
                {"type": "Hostname", "address": name},
            ],
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            # The kubelet reports a new bootID after every boot (/proc/sys/kernel/random/boot_id).
            "nodeInfo": {"bootID": str(uuid.uuid4()), "kubeletVersion": "v1.31.4", "kernelVersion": "6.8.0-49"},
        },
    }


def _resources(gpus: int, mig: Mapping[str, int] | None, where: str) -> dict[str, Any]:
    amounts: dict[str, str] = {"cpu": "1", "memory": "1Gi"}
    extended: dict[str, str] = {}
    if gpus:
        extended["nvidia.com/gpu"] = str(gpus)
    for profile, count in (mig or {}).items():
        extended[profile if profile.startswith("nvidia.com/") else f"nvidia.com/{profile}"] = str(count)
    limits = dict(extended)
    requests = {**amounts, **extended} if where == "both" else dict(amounts)
    return {"requests": requests, "limits": limits}


def pod_body(
    name: str,
    namespace: str,
    *,
    node: str | None,
    gpus: int = 0,
    mig: Mapping[str, int] | None = None,
    gpu_in: str = "both",
    init_gpus: int = 0,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
    phase: str = "Running",
    ready: bool = True,
    grace: int | None = 30,
) -> dict[str, Any]:
    """A pod; `gpu_in` "both" puts GPU amounts in requests and limits, "limits" only in limits."""
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox", "resources": _resources(gpus, mig, gpu_in)}],
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
    }
    if init_gpus:
        spec["initContainers"] = [
            {"name": "init", "image": "busybox", "resources": _resources(init_gpus, None, "both")}
        ]
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if node:
        spec["nodeName"] = node
    conditions = [{"type": "Ready", "status": "True" if ready and phase == "Running" else "False"}]
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [owner_ref(owner)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions},
    }


def _template(labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"labels": dict(labels)},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def _workload(
    kind: str,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    owner: Mapping[str, Any] | None,
    spec: dict[str, Any],
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owner is not None:
        metadata["ownerReferences"] = [owner_ref(owner)]
    return {"apiVersion": API_VERSIONS[kind], "kind": kind, "metadata": metadata, "spec": spec, "status": {}}


def replicaset_body(
    name: str,
    namespace: str,
    replicas: int,
    labels: Mapping[str, str],
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    spec = {"replicas": replicas, "selector": {"matchLabels": dict(labels)}, "template": _template(labels)}
    return _workload("ReplicaSet", name, namespace, labels, owner, spec)


def deployment_body(name: str, namespace: str, replicas: int, labels: Mapping[str, str]) -> dict[str, Any]:
    spec = {"replicas": replicas, "selector": {"matchLabels": dict(labels)}, "template": _template(labels)}
    return _workload("Deployment", name, namespace, labels, None, spec)


def statefulset_body(name: str, namespace: str, replicas: int, labels: Mapping[str, str]) -> dict[str, Any]:
    spec = {
        "replicas": replicas,
        "serviceName": name,
        "selector": {"matchLabels": dict(labels)},
        "template": _template(labels),
    }
    return _workload("StatefulSet", name, namespace, labels, None, spec)


def daemonset_body(name: str, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    spec = {"selector": {"matchLabels": dict(labels)}, "template": _template(labels)}
    return _workload("DaemonSet", name, namespace, labels, None, spec)


def job_body(
    name: str, namespace: str, labels: Mapping[str, str], owner: Mapping[str, Any] | None
) -> dict[str, Any]:
    template = _template(labels)
    template["spec"]["restartPolicy"] = "Never"
    return _workload("Job", name, namespace, labels, owner, {"template": template, "suspend": False})


def cronjob_body(name: str, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    template = _template(labels)
    template["spec"]["restartPolicy"] = "Never"
    spec = {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": template}}}
    return _workload("CronJob", name, namespace, labels, None, spec)


def pdb_body(
    name: str,
    namespace: str,
    selector: Mapping[str, Any] | None,
    *,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    unhealthy_pod_eviction_policy: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": None if selector is None else dict(selector)}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if unhealthy_pod_eviction_policy is not None:
        spec["unhealthyPodEvictionPolicy"] = unhealthy_pod_eviction_policy
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }

"""Which pods hold a GPU (kubelet allocations) and which of them are using it right now (NVML processes).

Allocations come from PodResources; a pod is `active` when an NVML compute process on the GPU lives in
that pod's cgroup. Pod UIDs come from the device manager checkpoint; where it cannot be read, `active`
is null (unknown) and the processes still carry the pod UID found in their cgroup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from remediator.domain.json_values import JsonObject, JsonValue
from remediator.sidecar.cgroups import pod_of_pid
from remediator.sidecar.devices import GpuIds, parse_device_id
from remediator.sidecar.nvml import Process
from remediator.sidecar.podresources import PodAllocation

__all__ = ["PodQuery", "gpu_pods", "process_owners"]


@dataclass(frozen=True)
class PodQuery:
    """How to read kubelet device ids and where the host's /proc is."""

    strategy: Literal["uuid", "index"]
    resource_prefix: str
    proc_root: Path


def process_owners(proc_root: Path, processes: Sequence[Process]) -> list[JsonObject]:
    """Each process with the pod UID and container id its cgroup names (None for host processes)."""
    result: list[JsonObject] = []
    for proc in processes:
        owner = pod_of_pid(proc_root, proc.pid)
        result.append(
            {
                "pid": proc.pid,
                "used_memory_bytes": proc.used_memory_bytes,
                "pod_uid": owner.pod_uid if owner else None,
                "container_id": owner.container_id if owner else None,
            }
        )
    return result


def gpu_pods(
    query: PodQuery,
    gpu: GpuIds,
    wanted: str,
    allocations: Sequence[PodAllocation],
    owners: dict[tuple[str, str], str] | None,
    processes: Sequence[Process],
) -> JsonObject:
    """The pods allocated `wanted` (a GPU or MIG UUID on `gpu`), marked active when they run on it."""
    procs = process_owners(query.proc_root, processes)
    active_uids = {p["pod_uid"] for p in procs if p["pod_uid"]}
    pods: list[JsonValue] = []
    for alloc in allocations:
        containers: list[JsonValue] = []
        uid: str | None = None
        for dev in alloc.devices:
            if not dev.resource.startswith(query.resource_prefix):
                continue
            mine = [d for d in dev.device_ids if parse_device_id(d, query.strategy).matches(gpu, wanted)]
            if not mine:
                continue
            containers.append({"name": dev.container, "resource": dev.resource, "device_ids": [*mine]})
            if owners is not None:
                uid = uid or next(
                    (owners[(dev.resource, d)] for d in mine if (dev.resource, d) in owners), None
                )
        if not containers:
            continue
        pods.append(
            {
                "namespace": alloc.namespace,
                "name": alloc.name,
                "uid": uid,
                "containers": containers,
                "active": None if uid is None else uid in active_uids,
                "processes": [
                    {"pid": p["pid"], "used_memory_bytes": p["used_memory_bytes"]}
                    for p in procs
                    if uid is not None and p["pod_uid"] == uid
                ],
            }
        )
    notes: list[JsonValue] = []
    if owners is None:
        notes.append("kubelet device checkpoint unreadable: pod UIDs unknown, `active` is null")
    return {
        "uuid": wanted,
        "gpu_uuid": gpu.uuid,
        "index": gpu.index,
        "pods": pods,
        "processes": [*procs],
        "notes": notes,
    }

"""Pod UIDs for kubelet device allocations, from the kubelet device manager's checkpoint file.

PodResources names pods by namespace/name but not UID, while /proc/<pid>/cgroup gives only the UID.
The device manager's checkpoint (/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint) records
PodUID, container and device ids for every allocation; since a device id (time-sliced replicas included)
is allocated to one container at a time, joining on (resource, device id) ties the two together.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["read_device_owners"]


def _device_ids(raw: object) -> list[str]:
    # Since Kubernetes 1.20 DeviceIDs maps NUMA node -> ids; before that it was a plain list.
    if isinstance(raw, dict):
        return [str(i) for ids in raw.values() if isinstance(ids, list) for i in ids]
    if isinstance(raw, list):
        return [str(i) for i in raw]
    return []


def read_device_owners(path: Path) -> dict[tuple[str, str], str] | None:
    """(resource name, device id) -> pod UID; None when the checkpoint cannot be read."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    entries = data.get("Data", {}).get("PodDeviceEntries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    owners: dict[tuple[str, str], str] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        uid = str(entry.get("PodUID", "")).lower()
        resource = str(entry.get("ResourceName", ""))
        for device in _device_ids(entry.get("DeviceIDs")):
            owners[(resource, device)] = uid
    return owners

"""Device ids as the kubelet reports them, reduced to "which physical GPU (or MIG device) is this".

The NVIDIA device plugin names devices by UUID (`GPU-...`, `MIG-...`, legacy `MIG-GPU-<uuid>/<gi>/<ci>`)
or, with `--device-id-strategy=index`, by index (`0`, or `0:1` for MIG); time-slicing appends `::<n>`
for each replica. `DeviceRef.matches` decides whether an id belongs to a GPU of the inventory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["DeviceRef", "GpuIds", "parse_device_id"]

_INDEX = re.compile(r"^(\d+)(?::(\d+))?$")


@dataclass(frozen=True)
class GpuIds:
    """The IDs a device ID may name one physical GPU by: its index, UUID and the UUIDs of its MIG devices. Not the
    identity a replacement (RMA) request names (sidecar/schemas.py: GpuIdentity, serial and board facts)."""

    index: int
    uuid: str
    mig_uuids: Sequence[str] = ()


@dataclass(frozen=True)
class DeviceRef:
    """One normalised device id. kind `gpu`/`mig` carry a UUID, kind `index` a GPU index."""

    raw: str
    kind: Literal["gpu", "mig", "index", "unknown"]
    value: str
    parent_uuid: str | None = None
    replica: int | None = None

    def matches(self, gpu: GpuIds, wanted: str) -> bool:
        """Whether this device is `wanted` (a GPU UUID, or a MIG UUID) on `gpu`."""
        if wanted.startswith("MIG-"):
            return self.kind == "mig" and self.value == wanted
        if wanted != gpu.uuid:
            return False
        if self.kind == "gpu":
            return self.value == gpu.uuid
        if self.kind == "mig":
            return self.parent_uuid == gpu.uuid or self.value in gpu.mig_uuids
        if self.kind == "index":
            return self.value == str(gpu.index)
        return False


def parse_device_id(raw: str, strategy: Literal["uuid", "index"]) -> DeviceRef:
    """Normalise a kubelet device id (time-slicing suffix removed, legacy MIG form resolved)."""
    base, sep, replica_text = raw.partition("::")
    replica = int(replica_text) if sep and replica_text.isdigit() else None
    if base.startswith("MIG-GPU-"):
        parent = base[len("MIG-") :].split("/")[0]
        return DeviceRef(raw, "mig", base, parent_uuid=parent, replica=replica)
    if base.startswith("MIG-"):
        return DeviceRef(raw, "mig", base, replica=replica)
    if base.startswith("GPU-"):
        return DeviceRef(raw, "gpu", base, replica=replica)
    found = _INDEX.match(base)
    if found is not None and strategy == "index":
        return DeviceRef(raw, "index", found.group(1), replica=replica)
    return DeviceRef(raw, "unknown", base, replica=replica)

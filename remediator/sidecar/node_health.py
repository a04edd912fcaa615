"""One read of every GPU's identity and health fields (those DCGM does not export, and those dcgm-exporter's default
counters file leaves off, for the rules' fallbacks), on the NVML thread.

Each field a GPU cannot report (NOT_SUPPORTED, an old driver without the entry point) is left out
rather than failing the read, and a GPU that answers NVML_ERROR_GPU_IS_LOST (or whose handle cannot be
had any more) is reported as lost instead of hiding the others. Which GPUs a pod holds is decided by the
caller from the kubelet's allocations; here each GPU carries the framebuffer its compute processes use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from remediator.errors import RemediatorError
from remediator.sidecar import nvml as nv
from remediator.sidecar.nvml import DeviceHandle, Nvml, NvmlError

__all__ = ["GpuHealth", "GpuRecord", "LostGpu", "NodeHealth", "read_node_health"]

T = TypeVar("T")

_ABSENT = {nv.NOT_SUPPORTED, nv.FUNCTION_NOT_FOUND, nv.NO_DATA, nv.INVALID_ARGUMENT}
_LOST = {nv.GPU_IS_LOST, nv.UNKNOWN}
_FATAL = {nv.UNINITIALIZED, nv.LIBRARY_NOT_FOUND, nv.DRIVER_NOT_LOADED}


@dataclass(frozen=True)
class GpuRecord:
    """What names a GPU in metrics and alerts; `pci_bus_id` in NVML's form `00000000:CB:00.0`."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str


@dataclass
class GpuHealth:
    """One GPU that answered, with the fields it could report (None: not reported by this GPU)."""

    gpu: GpuRecord
    values: dict[str, float | None] = field(default_factory=dict)
    process_memory_bytes: int = 0
    mig_uuids: tuple[str, ...] = ()
    # link -> NVLink error counter (replay, recovery, crc_flit, crc_data) -> count, active links only
    nvlink_errors: dict[int, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class LostGpu:
    """A GPU NVML still lists but cannot talk to: its index and why."""

    index: int
    uuid: str | None
    reason: str


@dataclass
class NodeHealth:
    gpus: list[GpuHealth]
    lost: list[LostGpu]


class _GpuLost(RemediatorError):
    pass


def _optional(read: Callable[[], T]) -> T | None:
    try:
        return read()
    except NvmlError as exc:
        if exc.code in _ABSENT:
            return None
        if exc.code in _LOST:
            raise _GpuLost(exc.name) from None
        raise


def read_gpu_record(nvml: Nvml, handle: DeviceHandle) -> GpuRecord:
    return GpuRecord(
        index=nvml.index(handle),
        uuid=nvml.uuid(handle),
        pci_bus_id=nvml.pci_bus_id(handle),
        name=nvml.name(handle),
    )


def _read_one(nvml: Nvml, handle: DeviceHandle) -> GpuHealth:
    try:
        record = read_gpu_record(nvml, handle)
    except NvmlError as exc:
        if exc.code in _LOST:
            raise _GpuLost(exc.name) from None
        raise
    values: dict[str, float | None] = {}
    values["temperature_slowdown_celsius"] = _optional(lambda: nvml.temperature_threshold(handle, "slowdown"))
    values["temperature_shutdown_celsius"] = _optional(lambda: nvml.temperature_threshold(handle, "shutdown"))
    link = _optional(lambda: nvml.pcie_link(handle))
    if link is not None:
        for name, value in zip(
            ("pcie_link_generation", "pcie_link_generation_max", "pcie_link_width", "pcie_link_width_max"),
            (link.generation, link.max_generation, link.width, link.max_width),
            strict=True,
        ):
            values[name] = value
    values["recovery_action"] = _optional(lambda: nvml.recovery_action(handle))
    rows = _optional(lambda: nvml.remapped_rows(handle))
    if rows is not None:
        values["remapped_rows_pending"] = int(rows.pending)
        values["remapped_rows_failure"] = int(rows.failure)
    values["ecc_uncorrected_volatile"] = _optional(lambda: nvml.ecc_errors(handle, "uncorrected", "volatile"))
    values["ecc_corrected_volatile"] = _optional(lambda: nvml.ecc_errors(handle, "corrected", "volatile"))
    values["clock_event_reasons"] = _optional(lambda: nvml.clock_event_reasons(handle))
    values["retired_pages_pending"] = _optional(lambda: int(nvml.retired_pages_pending(handle)))
    values["power_usage_watts"] = _optional(lambda: nvml.power_usage_mw(handle) / 1000)
    values["power_limit_watts"] = _optional(lambda: nvml.power_limit_mw(handle) / 1000)
    processes = _optional(lambda: nvml.compute_processes(handle)) or []
    used = sum(p.used_memory_bytes or 0 for p in processes)
    mig = _optional(lambda: nvml.mig_mode(handle))
    migs = tuple(_optional(lambda: nvml.mig_device_uuids(handle)) or ()) if mig and mig[0] else ()
    nvlink = _optional(lambda: nvml.nvlink_errors(handle)) or {}
    return GpuHealth(record, values, used, migs, nvlink)


def read_node_health(nvml: Nvml) -> NodeHealth:
    """Every GPU NVML lists: those that answer with their health, those that do not as lost."""
    health = NodeHealth(gpus=[], lost=[])
    for index in range(nvml.device_count()):
        uuid: str | None = None
        try:
            handle = nvml.handle_by_index(index)
            try:
                uuid = nvml.uuid(handle)
            except NvmlError as exc:
                if exc.code not in _LOST:
                    raise
            health.gpus.append(_read_one(nvml, handle))
        except _GpuLost as exc:
            health.lost.append(LostGpu(index, uuid, f"NVML_ERROR_{exc}"))
        except NvmlError as exc:
            if exc.code in _FATAL:
                raise
            health.lost.append(LostGpu(index, uuid, f"NVML_ERROR_{exc.name}"))
    return health

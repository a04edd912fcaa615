"""A JSON-ready snapshot of one GPU or all of them, read through `Nvml` on the NVML thread.

Fields a GPU cannot report (NVML answers NOT_SUPPORTED, e.g. retired pages on H100/H200, which remap
rows instead) become null with a note under `notes`, so one missing feature never hides the rest.
Power values are converted from NVML's milliwatts to watts here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeVar

from remediator.domain.json_values import JsonObject
from remediator.errors import GpuNotFound
from remediator.sidecar import nvml as nv
from remediator.sidecar.devices import GpuIds
from remediator.sidecar.nvml import DeviceHandle, Nvml, NvmlError

__all__ = ["find_handle", "identities", "snapshot", "snapshot_all", "watts"]

T = TypeVar("T")

# Errors that mean "this GPU cannot tell", not "something is wrong".
_ABSENT = {nv.NOT_SUPPORTED, nv.FUNCTION_NOT_FOUND, nv.NO_DATA}


def watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0


def find_handle(nvml: Nvml, uuid: str) -> DeviceHandle:
    """The handle of the GPU with this UUID (NOT_FOUND/INVALID_ARGUMENT become GpuNotFound)."""
    try:
        return nvml.handle_by_uuid(uuid)
    except NvmlError as exc:
        if exc.code in (nv.NOT_FOUND, nv.INVALID_ARGUMENT, nv.GPU_NOT_FOUND):
            raise GpuNotFound(uuid) from None
        raise


class _Reader:
    """Reads optional fields, collecting a note for each one the GPU cannot report."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}

    def get(self, field: str, read: Callable[[], T]) -> T | None:
        try:
            return read()
        except NvmlError as exc:
            if exc.code in _ABSENT:
                self.notes[field] = f"not reported by this GPU (NVML_ERROR_{exc.name})"
                return None
            raise


def snapshot(nvml: Nvml, handle: DeviceHandle) -> JsonObject:
    """Everything the controller and an SRE want to know about one GPU."""
    r = _Reader()
    constraints = r.get("power_limit_constraints", lambda: nvml.power_limit_constraints_mw(handle))
    low, high = constraints if constraints is not None else (None, None)
    ecc_mode = r.get("ecc_mode", lambda: nvml.ecc_mode(handle))
    remapped = r.get("remapped_rows", lambda: nvml.remapped_rows(handle))
    mig = r.get("mig_mode", lambda: nvml.mig_mode(handle))
    mig_devices = r.get("mig_devices", lambda: nvml.mig_device_uuids(handle)) if mig and mig[0] else []
    processes = nvml.compute_processes(handle)
    return {
        "index": nvml.index(handle),
        "uuid": nvml.uuid(handle),
        "name": nvml.name(handle),
        "pci_bus_id": nvml.pci_bus_id(handle),
        "temperature_c": r.get("temperature_c", lambda: nvml.temperature(handle)),
        "temperature_slowdown_c": r.get(
            "temperature_slowdown_c", lambda: nvml.temperature_threshold(handle, "slowdown")
        ),
        "temperature_shutdown_c": r.get(
            "temperature_shutdown_c", lambda: nvml.temperature_threshold(handle, "shutdown")
        ),
        "power_draw_watts": watts(r.get("power_draw_watts", lambda: nvml.power_usage_mw(handle))),
        "power_limit_watts": watts(r.get("power_limit_watts", lambda: nvml.power_limit_mw(handle))),
        "power_limit_default_watts": watts(
            r.get("power_limit_default_watts", lambda: nvml.default_power_limit_mw(handle))
        ),
        "power_limit_min_watts": watts(low),
        "power_limit_max_watts": watts(high),
        "power_limit_enforced_watts": watts(
            r.get("power_limit_enforced_watts", lambda: nvml.enforced_power_limit_mw(handle))
        ),
        "ecc": {
            "enabled": None if ecc_mode is None else ecc_mode[0],
            "pending": None if ecc_mode is None else ecc_mode[1],
            "volatile": {**_ecc_counts(r, nvml, handle, "volatile")},
            "aggregate": {**_ecc_counts(r, nvml, handle, "aggregate")},
        },
        "retired_pages": r.get("retired_pages", lambda: nvml.retired_pages(handle)),
        "remapped_rows": None
        if remapped is None
        else {
            "correctable": remapped.correctable,
            "uncorrectable": remapped.uncorrectable,
            "pending": remapped.pending,
            "failure": remapped.failure,
        },
        "mig": {
            "current": None if mig is None else mig[0],
            "pending": None if mig is None else mig[1],
            "devices": [*(mig_devices or [])],
        },
        "processes": [{"pid": p.pid, "used_memory_bytes": p.used_memory_bytes} for p in processes],
        "notes": {**r.notes},
    }


def _ecc_counts(
    r: _Reader, nvml: Nvml, handle: DeviceHandle, kind: Literal["volatile", "aggregate"]
) -> dict[str, int | None]:
    return {
        "corrected": r.get(f"ecc.{kind}.corrected", lambda: nvml.ecc_errors(handle, "corrected", kind)),
        "uncorrected": r.get(f"ecc.{kind}.uncorrected", lambda: nvml.ecc_errors(handle, "uncorrected", kind)),
    }


def snapshot_all(nvml: Nvml) -> list[JsonObject]:
    """Every GPU; a GPU that fails to answer appears as {index, error, nvml_error} instead of hiding all."""
    gpus: list[JsonObject] = []
    for index in range(nvml.device_count()):
        try:
            gpus.append(snapshot(nvml, nvml.handle_by_index(index)))
        except NvmlError as exc:
            if exc.code in (nv.UNINITIALIZED, nv.LIBRARY_NOT_FOUND, nv.DRIVER_NOT_LOADED):
                raise
            gpus.append({"index": index, "error": str(exc), "nvml_error": exc.name})
    return gpus


def identities(nvml: Nvml) -> list[GpuIds]:
    """Index, UUID and MIG device UUIDs of every GPU, for matching kubelet device ids."""
    result = []
    for index in range(nvml.device_count()):
        handle = nvml.handle_by_index(index)
        try:
            mig_on = nvml.mig_mode(handle)[0]
        except NvmlError as exc:
            if exc.code not in _ABSENT:
                raise
            mig_on = False
        migs = nvml.mig_device_uuids(handle) if mig_on else []
        result.append(GpuIds(index=index, uuid=nvml.uuid(handle), mig_uuids=tuple(migs)))
    return result

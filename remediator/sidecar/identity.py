"""`GET /v1/gpus/{id}/identity`: the board facts a replacement (RMA) request needs, read on the NVML thread.

A GPU that has to be replaced is often one that answers NVML badly, so every field is read on its own:
a field NVML refuses (NOT_SUPPORTED, GPU_IS_LOST, ...) becomes null and is named in `unreadable` with the
error, and the rest still comes back. A GPU that is listed but does not even give a handle (GPU_IS_LOST)
answers with every device field unreadable. Only a GPU that is not on the node (404) or NVML itself
being unusable (uninitialised, library or driver missing) fails the request.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from remediator.sidecar import nvml as nv
from remediator.sidecar.nvml import DeviceHandle, Nvml, NvmlError
from remediator.sidecar.problems import Problem
from remediator.sidecar.schemas import GpuIdentity, RemappedRowCounts

__all__ = ["read_identity"]

T = TypeVar("T")

# NVML itself is unusable: no field of any GPU can be read, so the request fails.
_FATAL = {nv.UNINITIALIZED, nv.LIBRARY_NOT_FOUND, nv.DRIVER_NOT_LOADED}
_MISSING = {nv.INVALID_ARGUMENT, nv.NOT_FOUND, nv.GPU_NOT_FOUND}


def _handle(nvml: Nvml, gpu: str) -> tuple[DeviceHandle | None, str | None]:
    """(handle, None), or (None, NVML error name) for a GPU that is listed but gives no handle."""
    try:
        return (nvml.handle_by_index(int(gpu)) if gpu.isdigit() else nvml.handle_by_uuid(gpu)), None
    except NvmlError as exc:
        if exc.code in _MISSING:
            what = f"index {gpu}" if gpu.isdigit() else f"UUID {gpu}"
            raise Problem(404, f"no GPU with {what} on this node") from None
        if exc.code in _FATAL:
            raise
        return None, exc.name


def read_identity(nvml: Nvml, gpu: str) -> GpuIdentity:
    """The identity of the GPU with this UUID or decimal index."""
    unreadable: dict[str, str] = {}
    handle, handle_error = _handle(nvml, gpu)

    def read(field: str, call: Callable[[DeviceHandle], T]) -> T | None:
        if handle is None:
            unreadable[field] = handle_error or "UNKNOWN"
            return None
        try:
            return call(handle)
        except NvmlError as exc:
            if exc.code in _FATAL:
                raise
            unreadable[field] = exc.name
            return None

    uuid = read("uuid", nvml.uuid)
    if uuid is None and not gpu.isdigit():
        uuid = gpu  # the GPU was asked for by this UUID
        unreadable.pop("uuid", None)
    index = read("index", nvml.index)
    name = read("name", nvml.name)
    serial = read("serial", nvml.serial)
    part_number = read("board_part_number", nvml.board_part_number)
    vbios = read("vbios_version", nvml.vbios_version)
    pci_bus_id = read("pci_bus_id", nvml.pci_bus_id)
    try:
        driver: str | None = nvml.driver_version()
    except NvmlError as exc:
        if exc.code in _FATAL:
            raise
        driver = None
        unreadable["driver_version"] = exc.name
    remapped = read("remapped_rows", nvml.remapped_rows)
    return GpuIdentity(
        gpu=gpu,
        uuid=uuid,
        index=index,
        name=name,
        serial=serial,
        board_part_number=part_number,
        vbios_version=vbios,
        pci_bus_id=pci_bus_id,
        driver_version=driver,
        remapped_rows=None
        if remapped is None
        else RemappedRowCounts(
            correctable=remapped.correctable,
            uncorrectable=remapped.uncorrectable,
            pending=remapped.pending,
            failure=remapped.failure,
        ),
        retired_pages_pending=read("retired_pages_pending", nvml.retired_pages_pending),
        unreadable=unreadable,
        read_at=datetime.now(UTC),
    )

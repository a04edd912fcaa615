"""The one module that talks to NVML (through nvidia-ml-py, imported as `pynvml`).

Everything NVML-specific lives here: versioned entry points, milliwatt units, the drain/remove/rediscover
reset sequence and the translation of `pynvml.NVMLError` into `NvmlError`, which carries the numeric
NVML code so the HTTP layer can answer 501/403/410/... without importing pynvml. Calls block; callers run
them on the sidecar's single NVML thread (see `worker.py`). This module deliberately imports nothing
heavier than the standard library and pynvml, so `scripts/nvml_smoke.py` can use it on a bare GPU host.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, NewType, TypeVar

import pynvml

from remediator.errors import RemediatorError

__all__ = [
    "NVLINK_ERROR_COUNTERS",
    "DeviceHandle",
    "NvlinkCounter",
    "Nvml",
    "NvmlError",
    "Observer",
    "PcieLink",
    "Process",
    "RemappedRows",
    "XidNotice",
    "error_name",
]

T = TypeVar("T")

DeviceHandle = NewType("DeviceHandle", object)
# Called after every NVML call with (function name, seconds taken, NVML error code or None).
Observer = Callable[[str, float, "int | None"], None]

# NVML return codes (nvml.h); copied so other modules never import pynvml.
SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
IN_USE = 19
NO_DATA = 21
ARGUMENT_VERSION_MISMATCH = 25
GPU_NOT_FOUND = 28
UNKNOWN = 999

_ERROR_NAMES = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    5: "ALREADY_INITIALIZED",
    6: "NOT_FOUND",
    7: "INSUFFICIENT_SIZE",
    8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED",
    10: "TIMEOUT",
    11: "IRQ_ISSUE",
    12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND",
    14: "CORRUPTED_INFOROM",
    15: "GPU_IS_LOST",
    16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM",
    18: "LIB_RM_VERSION_MISMATCH",
    19: "IN_USE",
    20: "MEMORY",
    21: "NO_DATA",
    22: "VGPU_ECC_NOT_SUPPORTED",
    23: "INSUFFICIENT_RESOURCES",
    24: "FREQ_NOT_SUPPORTED",
    25: "ARGUMENT_VERSION_MISMATCH",
    26: "DEPRECATED",
    27: "NOT_READY",
    28: "GPU_NOT_FOUND",
    29: "INVALID_STATE",
    30: "RESET_TYPE_NOT_SUPPORTED",
    999: "UNKNOWN",
}

_THRESHOLDS = {"shutdown": 0, "slowdown": 1, "memory_max": 2, "gpu_max": 3}
_ECC_ERROR = {"corrected": 0, "uncorrected": 1}
_ECC_COUNTER = {"volatile": 0, "aggregate": 1}
# Page retirement causes: multiple single-bit ECC errors, double-bit ECC error.
_RETIREMENT_CAUSES = (0, 1)
_TEMPERATURE_GPU = 0
_TEMPERATURE_V1 = 0x100000C
_DETACH_GPU_REMOVE = 1
_PCIE_LINK_KEEP = 0
_FEATURE_DISABLED = 0
_FEATURE_ENABLED = 1
_NOT_AVAILABLE_U64 = 2**64 - 1
EVENT_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
FI_DEV_GET_GPU_RECOVERY_ACTION = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
FI_DEV_NVLINK_LINK_COUNT = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT: the links this GPU has
# NVML_NVLINK_MAX_LINKS of the bindings in use (18 up to Hopper's headers, 36 since Blackwell's).
NVLINK_MAX_LINKS = int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))
NvlinkCounter = Literal["replay", "recovery", "crc_flit", "crc_data"]
# nvmlNvLinkErrorCounter_t: the data-link error counters DCGM's NVLink error fields sum over the links.
NVLINK_ERROR_COUNTERS: dict[NvlinkCounter, int] = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}


def error_name(code: int) -> str:
    """NVML_ERROR_<name> without the prefix, e.g. 3 -> NOT_SUPPORTED."""
    return _ERROR_NAMES.get(code, f"ERROR_{code}")


class NvmlError(RemediatorError):
    """An NVML call failed; `code` is the NVML return code, `function` the entry point."""

    def __init__(self, code: int, function: str) -> None:
        self.code = code
        self.function = function
        self.name = error_name(code)
        super().__init__(f"{function}: NVML_ERROR_{self.name}")


@dataclass(frozen=True)
class Process:
    """A compute process on a GPU; used_memory_bytes is None where NVML cannot tell."""

    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True)
class PcieLink:
    """PCIe link now and at most (generation 1-6, width in lanes)."""

    generation: int
    max_generation: int
    width: int
    max_width: int


@dataclass(frozen=True)
class XidNotice:
    """An Xid NVML delivered through an event set: the GPU's UUID (None when unreadable) and the code."""

    uuid: str | None
    xid: int


@dataclass(frozen=True)
class RemappedRows:
    """Row-remapping state: rows remapped for correctable/uncorrectable errors, pending, failed."""

    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


def _no_observer(function: str, seconds: float, code: int | None) -> None:
    return None


class Nvml:
    """Typed, blocking NVML calls. Not thread-safe on purpose: use it from one thread."""

    def __init__(self, observer: Observer = _no_observer) -> None:
        self._observer = observer
        self._initialized = False

    @property
    def initialized(self) -> bool:
        return self._initialized

    def _call(self, function: str, call: Callable[[], T]) -> T:
        start = time.perf_counter()
        try:
            result = call()
        except pynvml.NVMLError as exc:
            code = int(exc.value)
            self._observer(function, time.perf_counter() - start, code)
            if code == UNINITIALIZED:
                self._initialized = False
            raise NvmlError(code, function) from None
        self._observer(function, time.perf_counter() - start, None)
        return result

    # -- library -----------------------------------------------------------------------------------

    def init(self) -> None:
        if not self._initialized:
            self._call("nvmlInit", pynvml.nvmlInit)
            self._initialized = True

    def shutdown(self) -> None:
        if self._initialized:
            self._initialized = False
            self._call("nvmlShutdown", pynvml.nvmlShutdown)

    def driver_version(self) -> str:
        return str(self._call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))

    def nvml_version(self) -> str:
        return str(self._call("nvmlSystemGetNVMLVersion", pynvml.nvmlSystemGetNVMLVersion))

    # -- devices -----------------------------------------------------------------------------------

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))

    def handle_by_index(self, index: int) -> DeviceHandle:
        return DeviceHandle(
            self._call("nvmlDeviceGetHandleByIndex", lambda: pynvml.nvmlDeviceGetHandleByIndex(index))
        )

    def handle_by_uuid(self, uuid: str) -> DeviceHandle:
        return DeviceHandle(
            self._call("nvmlDeviceGetHandleByUUID", lambda: pynvml.nvmlDeviceGetHandleByUUID(uuid))
        )

    def index(self, handle: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetIndex", lambda: pynvml.nvmlDeviceGetIndex(handle)))

    def uuid(self, handle: DeviceHandle) -> str:
        return str(self._call("nvmlDeviceGetUUID", lambda: pynvml.nvmlDeviceGetUUID(handle)))

    def name(self, handle: DeviceHandle) -> str:
        return str(self._call("nvmlDeviceGetName", lambda: pynvml.nvmlDeviceGetName(handle)))

    def pci_bus_id(self, handle: DeviceHandle) -> str:
        info = self._call("nvmlDeviceGetPciInfo", lambda: pynvml.nvmlDeviceGetPciInfo(handle))
        bus_id = info.busId
        return bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)

    # -- board identity (what a replacement request names) -----------------------------------------

    def serial(self, handle: DeviceHandle) -> str:
        """The board serial number printed on the GPU (NOT_SUPPORTED on some boards and in VMs)."""
        return str(self._call("nvmlDeviceGetSerial", lambda: pynvml.nvmlDeviceGetSerial(handle)))

    def board_part_number(self, handle: DeviceHandle) -> str:
        return str(
            self._call("nvmlDeviceGetBoardPartNumber", lambda: pynvml.nvmlDeviceGetBoardPartNumber(handle))
        )

    def vbios_version(self, handle: DeviceHandle) -> str:
        return str(self._call("nvmlDeviceGetVbiosVersion", lambda: pynvml.nvmlDeviceGetVbiosVersion(handle)))

    # -- health ------------------------------------------------------------------------------------

    def temperature(self, handle: DeviceHandle) -> int:
        """GPU core temperature in C (nvmlDeviceGetTemperatureV; the older call on drivers without it)."""
        try:
            return int(
                self._call(
                    "nvmlDeviceGetTemperatureV",
                    lambda: pynvml.nvmlDeviceGetTemperatureV(handle, _TEMPERATURE_GPU, _TEMPERATURE_V1),
                )
            )
        except NvmlError as exc:
            if exc.code not in (FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH):
                raise
        return int(
            self._call(
                "nvmlDeviceGetTemperature", lambda: pynvml.nvmlDeviceGetTemperature(handle, _TEMPERATURE_GPU)
            )
        )

    def temperature_threshold(
        self, handle: DeviceHandle, kind: Literal["slowdown", "shutdown", "memory_max", "gpu_max"]
    ) -> int:
        threshold = _THRESHOLDS[kind]
        return int(
            self._call(
                "nvmlDeviceGetTemperatureThreshold",
                lambda: pynvml.nvmlDeviceGetTemperatureThreshold(handle, threshold),
            )
        )

    def ecc_mode(self, handle: DeviceHandle) -> tuple[bool, bool]:
        """(current, pending) ECC mode."""
        current, pending = self._call("nvmlDeviceGetEccMode", lambda: pynvml.nvmlDeviceGetEccMode(handle))
        return bool(current), bool(pending)

    def ecc_errors(
        self,
        handle: DeviceHandle,
        error: Literal["corrected", "uncorrected"],
        counter: Literal["volatile", "aggregate"],
    ) -> int:
        error_type, counter_type = _ECC_ERROR[error], _ECC_COUNTER[counter]
        return int(
            self._call(
                "nvmlDeviceGetTotalEccErrors",
                lambda: pynvml.nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type),
            )
        )

    def remapped_rows(self, handle: DeviceHandle) -> RemappedRows:
        corr, unc, pending, failure = self._call(
            "nvmlDeviceGetRemappedRows", lambda: pynvml.nvmlDeviceGetRemappedRows(handle)
        )
        return RemappedRows(int(corr), int(unc), bool(pending), bool(failure))

    def retired_pages(self, handle: DeviceHandle) -> int:
        """Pages retired for either cause (NOT_SUPPORTED on GPUs that remap rows instead, e.g. H100/H200)."""
        total = 0
        for cause in _RETIREMENT_CAUSES:
            pages = self._call(
                "nvmlDeviceGetRetiredPages", partial(pynvml.nvmlDeviceGetRetiredPages, handle, cause)
            )
            total += len(pages)
        return total

    def mig_mode(self, handle: DeviceHandle) -> tuple[bool, bool]:
        """(current, pending) MIG mode."""
        current, pending = self._call("nvmlDeviceGetMigMode", lambda: pynvml.nvmlDeviceGetMigMode(handle))
        return bool(current), bool(pending)

    def mig_device_uuids(self, handle: DeviceHandle) -> list[str]:
        """UUIDs of the MIG devices that exist on a GPU in MIG mode."""
        return [self.uuid(mig) for mig in self._mig_devices(handle)]

    def mig_device_of_instance(self, handle: DeviceHandle, gpu_instance: int) -> str | None:
        """UUID of the MIG device of GPU instance `gpu_instance` on a GPU (the `GPU-I` the driver prints in
        an Xid line), or None when the GPU has none."""
        for mig in self._mig_devices(handle):
            found = self._call("nvmlDeviceGetGpuInstanceId", partial(pynvml.nvmlDeviceGetGpuInstanceId, mig))
            if int(found) == gpu_instance:
                return self.uuid(mig)
        return None

    def _mig_devices(self, handle: DeviceHandle) -> Iterator[DeviceHandle]:
        """The MIG devices that exist on a GPU in MIG mode (empty slots skipped)."""
        count = int(
            self._call(
                "nvmlDeviceGetMaxMigDeviceCount", lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
            )
        )
        for i in range(count):
            try:
                mig = self._call(
                    "nvmlDeviceGetMigDeviceHandleByIndex",
                    partial(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i),
                )
            except NvmlError as exc:
                if exc.code in (NOT_FOUND, INVALID_ARGUMENT):
                    continue
                raise
            yield DeviceHandle(mig)

    def compute_processes(self, handle: DeviceHandle) -> list[Process]:
        procs = self._call(
            "nvmlDeviceGetComputeRunningProcesses",
            lambda: pynvml.nvmlDeviceGetComputeRunningProcesses_v3(handle),
        )
        result = []
        for p in procs:
            used = p.usedGpuMemory
            if used is not None and int(used) == _NOT_AVAILABLE_U64:
                used = None
            result.append(Process(pid=int(p.pid), used_memory_bytes=None if used is None else int(used)))
        return result

    # -- power (milliwatts, as NVML reports them) ---------------------------------------------------

    def power_usage_mw(self, handle: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetPowerUsage", lambda: pynvml.nvmlDeviceGetPowerUsage(handle)))

    def power_limit_mw(self, handle: DeviceHandle) -> int:
        return int(
            self._call(
                "nvmlDeviceGetPowerManagementLimit", lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle)
            )
        )

    def default_power_limit_mw(self, handle: DeviceHandle) -> int:
        return int(
            self._call(
                "nvmlDeviceGetPowerManagementDefaultLimit",
                lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle),
            )
        )

    def power_limit_constraints_mw(self, handle: DeviceHandle) -> tuple[int, int]:
        low, high = self._call(
            "nvmlDeviceGetPowerManagementLimitConstraints",
            lambda: pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle),
        )
        return int(low), int(high)

    def enforced_power_limit_mw(self, handle: DeviceHandle) -> int:
        return int(
            self._call(
                "nvmlDeviceGetEnforcedPowerLimit", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle)
            )
        )

    # -- mutations ---------------------------------------------------------------------------------

    def set_power_limit_mw(self, handle: DeviceHandle, milliwatts: int) -> None:
        self._call(
            "nvmlDeviceSetPowerManagementLimit",
            lambda: pynvml.nvmlDeviceSetPowerManagementLimit(handle, milliwatts),
        )

    def persistence_mode(self, handle: DeviceHandle) -> bool:
        """Persistence mode on: the driver keeps the GPU initialised with no client (a GPU reset needs it off)."""
        return bool(self._call("nvmlDeviceGetPersistenceMode", lambda: pynvml.nvmlDeviceGetPersistenceMode(handle)))

    def set_persistence_mode(self, handle: DeviceHandle, enabled: bool) -> None:
        mode = _FEATURE_ENABLED if enabled else _FEATURE_DISABLED
        self._call("nvmlDeviceSetPersistenceMode", lambda: pynvml.nvmlDeviceSetPersistenceMode(handle, mode))

    def minor_number(self, handle: DeviceHandle) -> int:
        """N of the GPU's device file /dev/nvidia<N>."""
        return int(self._call("nvmlDeviceGetMinorNumber", lambda: pynvml.nvmlDeviceGetMinorNumber(handle)))

    def reset(self, handle: DeviceHandle) -> None:
        """Drain the GPU, detach it from the driver and the OS, and rediscover it (a re-initialised GPU).

        On failure after draining, the drain is lifted again where the GPU is still there.
        """
        pci = self._call("nvmlDeviceGetPciInfo", lambda: pynvml.nvmlDeviceGetPciInfo(handle))
        self._call(
            "nvmlDeviceModifyDrainState", lambda: pynvml.nvmlDeviceModifyDrainState(pci, _FEATURE_ENABLED)
        )
        try:
            self._call("nvmlDeviceRemoveGpu_v2", lambda: _remove_gpu(pci))
        except NvmlError:
            self._undrain(pci)
            raise
        self._call("nvmlDeviceDiscoverGpus", lambda: pynvml.nvmlDeviceDiscoverGpus(pci))
        self._undrain(pci)

    def _undrain(self, pci: Any) -> None:
        with contextlib.suppress(NvmlError):
            self._call(
                "nvmlDeviceModifyDrainState",
                lambda: pynvml.nvmlDeviceModifyDrainState(pci, _FEATURE_DISABLED),
            )


    # -- validation reads (the return-to-service gate) ---------------------------------------------

    def pcie_link(self, handle: DeviceHandle) -> PcieLink:
        """Current and maximum PCIe generation and width (max = what this GPU in this slot can reach)."""
        return PcieLink(
            generation=int(self._call("nvmlDeviceGetCurrPcieLinkGeneration",
                                      lambda: pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))),
            max_generation=int(self._call("nvmlDeviceGetMaxPcieLinkGeneration",
                                          lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))),
            width=int(self._call("nvmlDeviceGetCurrPcieLinkWidth",
                                 lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle))),
            max_width=int(self._call("nvmlDeviceGetMaxPcieLinkWidth",
                                     lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle))),
        )

    def gpu_max_pcie_generation(self, handle: DeviceHandle) -> int:
        """The highest PCIe generation the GPU itself supports (the slot may allow less)."""
        return int(self._call("nvmlDeviceGetGpuMaxPcieLinkGeneration",
                              lambda: pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle)))

    def clock_event_reasons(self, handle: DeviceHandle) -> int:
        """Bit mask of active clock-event (formerly "throttle") reasons; older drivers' name as fallback."""
        try:
            return int(self._call("nvmlDeviceGetCurrentClocksEventReasons",
                                  lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)))
        except NvmlError as exc:
            if exc.code != FUNCTION_NOT_FOUND:
                raise
        return int(self._call("nvmlDeviceGetCurrentClocksThrottleReasons",
                              lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)))

    def retired_pages_pending(self, handle: DeviceHandle) -> bool:
        """Pages waiting to be retired at the next reset (NOT_SUPPORTED where rows are remapped instead)."""
        return bool(self._call("nvmlDeviceGetRetiredPagesPendingStatus",
                               lambda: pynvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)))

    # -- detector reads (health fields DCGM does not give, PCI lookup, Xid event sets) ---------------

    def handle_by_pci_bus_id(self, bus_id: str) -> DeviceHandle:
        return DeviceHandle(
            self._call(
                "nvmlDeviceGetHandleByPciBusId", lambda: pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
            )
        )

    def field_value(self, handle: DeviceHandle, field_id: int) -> int:
        """One integer field (nvmlDeviceGetFieldValues); the field's own error is raised as NvmlError."""
        values = self._call(
            "nvmlDeviceGetFieldValues", lambda: pynvml.nvmlDeviceGetFieldValues(handle, [field_id])
        )
        value = values[0]
        code = int(value.nvmlReturn)
        if code != SUCCESS:
            self._observer("nvmlDeviceGetFieldValues", 0.0, code)
            raise NvmlError(code, "nvmlDeviceGetFieldValues")
        kind = int(value.valueType)
        union = value.value
        return int(
            {0: union.dVal, 1: union.uiVal, 2: union.ulVal, 3: union.ullVal, 4: union.sllVal, 5: union.siVal,
             6: union.usVal}.get(kind, union.ullVal)
        )

    def nvlink_link_count(self, handle: DeviceHandle) -> int:
        """NVML_FI_DEV_NVLINK_LINK_COUNT: how many NVLinks the GPU has (0 or NOT_SUPPORTED without NVLink)."""
        return self.field_value(handle, FI_DEV_NVLINK_LINK_COUNT)

    def nvlink_active(self, handle: DeviceHandle, link: int) -> bool:
        """Whether NVLink `link` is up (NOT_SUPPORTED: the GPU has no NVLink; INVALID_ARGUMENT: no such link)."""
        return bool(self._call("nvmlDeviceGetNvLinkState",
                               partial(pynvml.nvmlDeviceGetNvLinkState, handle, link)))

    def nvlink_error_counter(self, handle: DeviceHandle, link: int, counter: NvlinkCounter) -> int:
        """One data-link error counter of one NVLink (counts since the driver loaded or the counters were reset)."""
        return int(self._call("nvmlDeviceGetNvLinkErrorCounter",
                              partial(pynvml.nvmlDeviceGetNvLinkErrorCounter, handle, link,
                                      NVLINK_ERROR_COUNTERS[counter])))

    def nvlink_errors(self, handle: DeviceHandle) -> dict[int, dict[str, int]]:
        """link -> counter -> count, for every active NVLink of the GPU ({} for a GPU without NVLink).

        Links are 0 .. the GPU's link count (NVML_FI_DEV_NVLINK_LINK_COUNT; NVML_NVLINK_MAX_LINKS where the field
        is not readable). A link NVML reports down, not supported or invalid is skipped; NOT_SUPPORTED for link 0
        ends the read (the GPU has no NVLink: no call per link then); a counter the GPU does not keep is left
        out of its link.
        """
        try:
            links = min(self.nvlink_link_count(handle), NVLINK_MAX_LINKS)
        except NvmlError as exc:
            if exc.code not in (NOT_SUPPORTED, INVALID_ARGUMENT, FUNCTION_NOT_FOUND, NO_DATA):
                raise
            links = NVLINK_MAX_LINKS
        found: dict[int, dict[str, int]] = {}
        for link in range(links):
            try:
                if not self.nvlink_active(handle, link):
                    continue
            except NvmlError as exc:
                if exc.code == FUNCTION_NOT_FOUND or (exc.code == NOT_SUPPORTED and link == 0):
                    break
                if exc.code in (NOT_SUPPORTED, INVALID_ARGUMENT, NOT_FOUND):
                    continue
                raise
            counts: dict[str, int] = {}
            for counter in NVLINK_ERROR_COUNTERS:
                try:
                    counts[counter] = self.nvlink_error_counter(handle, link, counter)
                except NvmlError as exc:
                    if exc.code not in (NOT_SUPPORTED, INVALID_ARGUMENT, FUNCTION_NOT_FOUND):
                        raise
            found[link] = counts
        return found

    def recovery_action(self, handle: DeviceHandle) -> int:
        """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain
        and reset (newer drivers add more)."""
        return self.field_value(handle, FI_DEV_GET_GPU_RECOVERY_ACTION)

    def xid_event_set(self, handles: list[DeviceHandle]) -> tuple[Any, int]:
        """An event set with every GPU that supports it registered for Xid critical errors.

        Returns (event set, number of GPUs registered); registering is read-only. Free it with
        `free_event_set`.
        """
        event_set = self._call("nvmlEventSetCreate", pynvml.nvmlEventSetCreate)
        registered = 0
        for handle in handles:
            try:
                supported = int(self._call("nvmlDeviceGetSupportedEventTypes",
                                           partial(pynvml.nvmlDeviceGetSupportedEventTypes, handle)))
                if not supported & EVENT_XID_CRITICAL:
                    continue
                self._call("nvmlDeviceRegisterEvents",
                           partial(pynvml.nvmlDeviceRegisterEvents, handle, EVENT_XID_CRITICAL, event_set))
                registered += 1
            except NvmlError as exc:
                if exc.code in (UNINITIALIZED, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND):
                    self.free_event_set(event_set)
                    raise
        return event_set, registered

    def wait_xid(self, event_set: Any, timeout_ms: int) -> XidNotice | None:
        """The next Xid event, or None when none came within `timeout_ms` (or the event was no Xid)."""
        try:
            data = self._call("nvmlEventSetWait", lambda: pynvml.nvmlEventSetWait_v2(event_set, timeout_ms))
        except NvmlError as exc:
            if exc.code == TIMEOUT:
                return None
            raise
        if not int(data.eventType) & EVENT_XID_CRITICAL:
            return None
        try:
            uuid: str | None = self.uuid(DeviceHandle(data.device))
        except NvmlError:
            uuid = None
        return XidNotice(uuid=uuid, xid=int(data.eventData))

    def free_event_set(self, event_set: Any) -> None:
        with contextlib.suppress(NvmlError):
            self._call("nvmlEventSetFree", lambda: pynvml.nvmlEventSetFree(event_set))


def _remove_gpu(pci: Any) -> None:
    """nvmlDeviceRemoveGpu_v2(pci, NVML_DETACH_GPU_REMOVE, NVML_PCIE_LINK_KEEP); pynvml wraps only v1."""
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceRemoveGpu_v2")
    ret = fn(ctypes.pointer(pci), ctypes.c_uint(_DETACH_GPU_REMOVE), ctypes.c_uint(_PCIE_LINK_KEEP))
    pynvml._nvmlCheckReturn(ret)

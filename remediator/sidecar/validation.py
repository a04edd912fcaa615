"""The return-to-service gate: NVML checks of one GPU (blocking, on the NVML thread) and the verdict.

Each check reads one thing and compares it with its limit (see `schemas.py` for verdicts). NVML answering
NOT_SUPPORTED or FUNCTION_NOT_FOUND makes a check `not_applicable` (retired pages on GPUs that remap rows,
older drivers without the recovery-action field); NVML answering GPU_IS_LOST makes it `fail` (the driver
says the GPU is lost: a fact about the GPU, read); any other NVML error makes it `error`, which fails the
gate too but proves nothing about the GPU: the controller reads a report whose blocking checks only erred
as "unknown", not as a broken GPU. What each check means and why its limit is what it is:

- `present`: the GPU's UUID is still in NVML's device list (a GPU that fell off the bus is not). A device
  whose UUID answers GPU_IS_LOST is passed over while looking, so it does not hide the others.
- `remapped_rows.failure` / `remapped_rows.pending`: a failed row remap means the memory cannot be repaired
  (replace the GPU); a pending one is applied only at the next reset, so the GPU is not yet repaired.
- `retired_pages.pending`: the same for GPUs that retire pages instead of remapping rows.
- `ecc.volatile_uncorrected`: must be 0 (a reset clears it; anything since is a new fault).
- `ecc.aggregate_uncorrected`: must not exceed the caller's baseline (the lifetime count before the fault).
- `pcie.width`: current lanes must equal the maximum (a narrower link is a training fault; NVIDIA's
  drivers do not narrow the link of these GPUs to save power).
- `pcie.generation`: current against the maximum of this GPU in this slot. nvidia-smi documents that the
  current link generation "may be reduced when the GPU is not in use", so a lower generation while the
  GPU-idle clock-event reason is set passes with a warning; under load it fails.
- `clock_events`: HW slowdown, HW thermal, HW power brake or SW thermal slowdown active fail; idle,
  application clocks, SW power cap, sync boost and display clock pass.
- `recovery_action`: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION must be 0 (none); anything else names what the
  driver asks for (GPU reset, node reboot, drain P2P, drain and reset, ...).
- `temperature`: below the slowdown threshold by at least the margin asked for.
"""

from __future__ import annotations

from collections.abc import Callable

from remediator.sidecar import nvml as nv
from remediator.sidecar.nvml import DeviceHandle, Nvml, NvmlError
from remediator.sidecar.schemas import BLOCKING_VERDICTS, Check, ValidateRequest

__all__ = [
    "CLOCK_EVENT_REASONS",
    "RECOVERY_ACTIONS",
    "SLOWDOWN_REASONS",
    "GpuChecks",
    "blocking",
    "nvml_checks",
]

_ABSENT = {nv.NOT_SUPPORTED, nv.FUNCTION_NOT_FOUND}

# nvmlClocksEventReason* bits (nvml.h).
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
SLOWDOWN_REASONS = 0x8 | 0x20 | 0x40 | 0x80
_GPU_IDLE = 0x1

# NVML_GPU_RECOVERY_ACTION_* (nvml.h).
RECOVERY_ACTIONS: dict[int, str] = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}


def blocking(checks: list[Check]) -> list[str]:
    """Names of the checks that fail the gate."""
    return [c.name for c in checks if c.verdict in BLOCKING_VERDICTS]


def _decode(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit] or ["none"]


class GpuChecks:
    """The NVML checks of one GPU, found by UUID; run them with `nvml_checks`."""

    def __init__(self, nvml: Nvml, uuid: str, request: ValidateRequest) -> None:
        self.nvml = nvml
        self.uuid = uuid
        self.request = request
        self.checks: list[Check] = []
        self.index: int | None = None
        self.processes = 0
        self._reasons: int | None = None

    def _guard(self, name: str, check: Callable[[], Check]) -> None:
        try:
            self.checks.append(check())
        except NvmlError as exc:
            if exc.code in _ABSENT:
                self.checks.append(
                    Check(name=name, verdict="not_applicable", detail=f"not reported by this GPU ({exc})")
                )
            elif exc.code == nv.GPU_IS_LOST:
                self.checks.append(Check(name=name, verdict="fail", detail=f"the GPU is lost ({exc})"))
            else:
                self.checks.append(Check(name=name, verdict="error", detail=f"cannot read: {exc}"))

    def present(self) -> DeviceHandle | None:
        """Look for the UUID among NVML's devices; records the `present` check."""
        lost: list[int] = []
        try:
            for index in range(self.nvml.device_count()):
                try:
                    handle = self.nvml.handle_by_index(index)
                    uuid = self.nvml.uuid(handle)
                except NvmlError as exc:
                    if exc.code != nv.GPU_IS_LOST:
                        raise
                    lost.append(index)
                    continue
                if uuid == self.uuid:
                    self.index = index
                    self.checks.append(
                        Check(name="present", verdict="pass", value=True, expected=True,
                              detail=f"found at index {index}")
                    )
                    return handle
        except NvmlError as exc:
            self.checks.append(Check(name="present", verdict="error", detail=f"cannot list GPUs: {exc}"))
            return None
        also = f"; the GPU(s) at index {', '.join(map(str, lost))} are lost" if lost else ""
        self.checks.append(
            Check(name="present", verdict="fail", value=False, expected=True,
                  detail=f"{self.uuid} is not in NVML's device list{also}")
        )
        return None

    def run(self, handle: DeviceHandle) -> None:
        n, h = self.nvml, handle
        with_reasons = self._read_reasons(h)
        self._guard("remapped_rows.failure", lambda: self._remap(h, "failure"))
        self._guard("remapped_rows.pending", lambda: self._remap(h, "pending"))
        self._guard("retired_pages.pending", lambda: self._flag(
            "retired_pages.pending", n.retired_pages_pending(h),
            "pages are waiting to be retired at the next reset"))
        self._guard("ecc.volatile_uncorrected", lambda: self._ecc_volatile(h))
        self._guard("ecc.aggregate_uncorrected", lambda: self._ecc_aggregate(h))
        self._guard("pcie.width", lambda: self._pcie_width(h))
        self._guard("pcie.generation", lambda: self._pcie_generation(h))
        self._guard("clock_events", with_reasons)
        self._guard("recovery_action", lambda: self._recovery(h))
        self._guard("temperature", lambda: self._temperature(h))
        try:
            self.processes = len(n.compute_processes(h))
        except NvmlError:
            self.processes = 0

    # -- single checks -------------------------------------------------------------------------------

    def _read_reasons(self, h: DeviceHandle) -> Callable[[], Check]:
        """Read the clock-event reasons once (the PCIe check needs the idle bit); the check reports them."""
        failure: NvmlError | None = None
        try:
            self._reasons = self.nvml.clock_event_reasons(h)
        except NvmlError as exc:
            failure = exc

        def check() -> Check:
            if failure is not None:
                raise failure
            mask = self._reasons or 0
            active = [CLOCK_EVENT_REASONS[b] for b in CLOCK_EVENT_REASONS if mask & b & SLOWDOWN_REASONS]
            return Check(
                name="clock_events",
                verdict="fail" if active else "pass",
                value={"mask": mask, "reasons": _decode(mask)},
                expected="no hardware or thermal slowdown",
                detail=f"slowdown active: {', '.join(active)}" if active else "no slowdown active",
            )

        return check

    @staticmethod
    def _flag(name: str, value: bool, meaning: str) -> Check:
        return Check(name=name, verdict="fail" if value else "pass", value=value, expected=False,
                     detail=meaning if value else "")

    def _remap(self, h: DeviceHandle, which: str) -> Check:
        rows = self.nvml.remapped_rows(h)
        counts = f"{rows.correctable} rows remapped for correctable, {rows.uncorrectable} for uncorrectable errors"
        if which == "failure":
            meaning = "row remapping failed: the memory cannot be repaired, replace the GPU"
            check = self._flag("remapped_rows.failure", rows.failure, meaning)
        else:
            meaning = "a row remap is pending: it is applied only by the next GPU reset"
            check = self._flag("remapped_rows.pending", rows.pending, meaning)
        check.detail = f"{check.detail}; {counts}" if check.detail else counts
        return check

    def _ecc_enabled(self, h: DeviceHandle) -> bool:
        try:
            return self.nvml.ecc_mode(h)[0]
        except NvmlError as exc:
            if exc.code in _ABSENT:
                return False
            raise

    def _ecc_volatile(self, h: DeviceHandle) -> Check:
        if not self._ecc_enabled(h):
            return Check(name="ecc.volatile_uncorrected", verdict="not_applicable", detail="ECC is disabled")
        count = self.nvml.ecc_errors(h, "uncorrected", "volatile")
        return Check(
            name="ecc.volatile_uncorrected", verdict="fail" if count else "pass", value=count, threshold=0,
            detail=f"{count} uncorrectable ECC errors since the last reset" if count else "",
        )

    def _ecc_aggregate(self, h: DeviceHandle) -> Check:
        if not self._ecc_enabled(h):
            return Check(name="ecc.aggregate_uncorrected", verdict="not_applicable", detail="ECC is disabled")
        count = self.nvml.ecc_errors(h, "uncorrected", "aggregate")
        baseline = self.request.aggregate_uncorrectable_baseline
        if baseline is None:
            return Check(name="ecc.aggregate_uncorrected", verdict="not_applicable", value=count,
                         detail="no baseline given: the lifetime count is reported, not judged")
        grown = count > baseline
        return Check(
            name="ecc.aggregate_uncorrected", verdict="fail" if grown else "pass", value=count,
            threshold=baseline,
            detail=f"{count - baseline} new uncorrectable ECC errors since the baseline" if grown else "",
        )

    def _pcie_width(self, h: DeviceHandle) -> Check:
        link = self.nvml.pcie_link(h)
        narrow = link.width < link.max_width
        return Check(
            name="pcie.width", verdict="fail" if narrow else "pass", value=link.width, expected=link.max_width,
            detail=f"link runs x{link.width} of x{link.max_width}" if narrow else f"x{link.width}",
        )

    def _pcie_generation(self, h: DeviceHandle) -> Check:
        link = self.nvml.pcie_link(h)
        detail = f"gen {link.generation} of {link.max_generation}"
        try:
            gpu_max = self.nvml.gpu_max_pcie_generation(h)
            if gpu_max > link.max_generation:
                detail += f" (the GPU supports gen {gpu_max}; the slot allows {link.max_generation})"
        except NvmlError as exc:
            if exc.code not in _ABSENT:
                raise
        if link.generation >= link.max_generation:
            return Check(name="pcie.generation", verdict="pass", value=link.generation,
                         expected=link.max_generation, detail=detail)
        if self._reasons is not None and self._reasons & _GPU_IDLE:
            return Check(
                name="pcie.generation", verdict="pass", value=link.generation, expected=link.max_generation,
                detail=detail,
                warning="the link runs below its maximum generation while the GPU idles (a power-saving "
                "downshift NVIDIA documents); it should reach the maximum under load",
            )
        return Check(name="pcie.generation", verdict="fail", value=link.generation, expected=link.max_generation,
                     detail=f"{detail} while the GPU is not idle: the link trained below its maximum")

    def _recovery(self, h: DeviceHandle) -> Check:
        action = self.nvml.recovery_action(h)
        name = RECOVERY_ACTIONS.get(action, f"unknown_{action}")
        return Check(
            name="recovery_action", verdict="pass" if action == 0 else "fail",
            value={"code": action, "action": name}, expected={"code": 0, "action": "none"},
            detail="" if action == 0 else f"the driver asks for: {name.replace('_', ' ')}",
        )

    def _temperature(self, h: DeviceHandle) -> Check:
        current = self.nvml.temperature(h)
        try:
            slowdown: int | None = self.nvml.temperature_threshold(h, "slowdown")
        except NvmlError as exc:
            if exc.code not in _ABSENT:
                raise
            slowdown = None
        if slowdown is None:
            return Check(name="temperature", verdict="not_applicable", value=current,
                         detail="the GPU reports no slowdown threshold")
        limit = slowdown - self.request.temperature_margin_c
        hot = current >= limit
        return Check(
            name="temperature", verdict="fail" if hot else "pass", value=current, threshold=limit,
            detail=f"{current} C; slowdown at {slowdown} C, margin {self.request.temperature_margin_c} C",
        )


def nvml_checks(nvml: Nvml, uuid: str, request: ValidateRequest) -> GpuChecks:
    """Every NVML check of the GPU with this UUID (only `present` when it is gone). Blocking."""
    gpu = GpuChecks(nvml, uuid, request)
    handle = gpu.present()
    if handle is not None:
        gpu.run(handle)
    return gpu

"""`POST /v1/gpus/{id}/validate`: the NVML checks, then DCGM's diagnostic, then one verdict.

The NVML checks run on the NVML thread; dcgmi runs as a child process on the event loop (it takes
seconds to minutes and must not hold the NVML thread), one diagnostic at a time per node because DCGM runs
one at a time. A level 2 or higher diagnostic loads the GPU, so it is not started while a compute process
runs on it: the DCGM check then errs and the gate fails, rather than disturbing a job.

Where the node detector runs (`init_failure` set), the `driver_init` check fails a GPU whose initialisation the
driver reported failed in this boot (`NVRM: GPU ...: RmInitAdapter failed!`) and no reset of it succeeded
since: NVML may still list such a GPU, but nothing can run on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from remediator.sidecar import nvml as nv
from remediator.sidecar.dcgm import find_dcgmi, run_diag
from remediator.sidecar.nvml import Nvml, NvmlError
from remediator.sidecar.problems import Problem
from remediator.sidecar.schemas import Check, DcgmRun, ValidateRequest, ValidationReport
from remediator.sidecar.validation import GpuChecks, blocking, nvml_checks

__all__ = ["Gate", "resolve_uuid"]

T = TypeVar("T")
NvmlCall = Callable[[str, Callable[[Nvml], T]], Awaitable[T]]


def resolve_uuid(nvml: Nvml, gpu: str) -> str:
    """A GPU UUID as given, or the UUID of the GPU at a decimal index (404 when there is none)."""
    if not gpu.isdigit():
        return gpu
    try:
        return nvml.uuid(nvml.handle_by_index(int(gpu)))
    except NvmlError as exc:
        if exc.code in (nv.INVALID_ARGUMENT, nv.NOT_FOUND, nv.GPU_NOT_FOUND):
            raise Problem(404, f"no GPU with index {gpu} on this node") from None
        raise


def _checks(nvml: Nvml, gpu: str, request: ValidateRequest) -> GpuChecks:
    try:
        uuid = resolve_uuid(nvml, gpu)
    except NvmlError as exc:
        if exc.code != nv.GPU_IS_LOST:
            raise
        # The GPU at this index is lost (its UUID cannot even be read): a failed `present`, read from NVML, not
        # an error answer that the controller would have to take for an unreadable agent.
        lost = GpuChecks(nvml, "", request)
        lost.checks.append(Check(name="present", verdict="fail", value=False, expected=True,
                                 detail=f"the GPU at index {gpu} is lost ({exc})"))
        return lost
    return nvml_checks(nvml, uuid, request)


class Gate:
    """Validates GPUs of this node; holds the DCGM lock and settings."""

    def __init__(self, dcgmi: Path | None, default_timeout: float) -> None:
        self.dcgmi = dcgmi
        self.default_timeout = default_timeout
        self._dcgm_lock = asyncio.Lock()
        # uuid -> the driver's init failure line for that GPU (None: none), or None without a node detector.
        self.init_failure: Callable[[str], str | None] | None = None

    async def validate(self, call: NvmlCall[GpuChecks], gpu: str, request: ValidateRequest) -> ValidationReport:
        """Validate the GPU `gpu` (a UUID or an index); `call` runs work on the NVML thread."""
        started = time.monotonic()
        checked_at = datetime.now(UTC)
        gpu_checks = await call(f"validate {gpu}", lambda nvml: _checks(nvml, gpu, request))
        checks = list(gpu_checks.checks)
        uuid = gpu_checks.uuid or (gpu if not gpu.isdigit() else "")
        if self.init_failure is not None and uuid:
            checks.append(self._driver_init(uuid, self.init_failure(uuid)))
        dcgm = await self._dcgm(gpu_checks, request, checks)
        failed = blocking(checks)
        return ValidationReport(
            gpu=gpu,
            uuid=gpu_checks.uuid or None,
            index=gpu_checks.index,
            verdict="fail" if failed else "pass",
            failed=failed,
            checks=checks,
            dcgm=dcgm,
            checked_at=checked_at,
            duration_seconds=round(time.monotonic() - started, 3),
        )

    @staticmethod
    def _driver_init(uuid: str, failure: str | None) -> Check:
        if failure is not None:
            return Check(name="driver_init", verdict="fail", value=False, expected=True,
                         detail=f"the driver could not initialise this GPU in this boot ({failure}); no reset "
                                "of it has succeeded since")
        return Check(name="driver_init", verdict="pass", value=True, expected=True,
                     detail="no RmInitAdapter failure in the kernel log for this GPU in this boot")

    async def _dcgm(self, gpu: GpuChecks, request: ValidateRequest, checks: list[Check]) -> DcgmRun:
        level = request.dcgm_level
        timeout = request.dcgm_timeout_seconds or self.default_timeout
        dcgmi = find_dcgmi(self.dcgmi)
        if dcgmi is None:
            where = f"at {self.dcgmi}" if self.dcgmi else "on PATH"
            error = f"dcgmi not found {where}: DCGM diagnostic level {level} not run"
            checks.append(Check(name="dcgm", verdict="fail" if request.require_dcgm else "not_applicable",
                                expected="dcgmi available" if request.require_dcgm else None,
                                detail=error + ("; required by the request" if request.require_dcgm else "")))
            return DcgmRun(available=False, error=error, level=level, timeout_seconds=timeout)
        if gpu.index is None:
            checks.append(Check(name="dcgm", verdict="not_applicable", detail="the GPU is gone: nothing to diagnose"))
            return DcgmRun(available=True, path=str(dcgmi), error="GPU not present", level=level,
                           timeout_seconds=timeout)
        if level >= 2 and gpu.processes:
            error = (f"{gpu.processes} compute process(es) run on the GPU: a level {level} diagnostic would "
                     "disturb them, so it was not started")
            checks.append(Check(name="dcgm", verdict="error", detail=error))
            return DcgmRun(available=True, path=str(dcgmi), error=error, level=level, timeout_seconds=timeout)
        async with self._dcgm_lock:
            run = await run_diag(dcgmi, level, gpu.index, timeout)
        if run.error is not None:
            checks.append(Check(name="dcgm", verdict="fail" if run.timed_out else "error", detail=run.error,
                                value={"exit_code": run.exit_code, "timed_out": run.timed_out}))
            return run
        checks.append(Check(name="dcgm", verdict="pass", value={"level": level, "tests": len(run.tests)},
                            detail=f"dcgmi diag -r {level} ran {len(run.tests)} tests"
                            + (f" (DCGM {run.version})" if run.version else "")))
        for test in run.tests:
            detail = "; ".join(w.warning for w in test.warnings)
            checks.append(Check(name=f"dcgm.{test.name}", verdict=test.verdict, value=test.status,
                                expected="Pass", detail=f"{test.category}: {detail}" if detail else test.category))
        return run

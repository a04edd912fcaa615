"""GPU reset: refuse while anything runs on the GPU, reset, then check the GPU came back healthy.

Two ways to reset: NVML's drain / remove / rediscover sequence (`reset_method=nvml`, the default) or
`nvidia-smi --gpu-reset -i <uuid>` run as an argument list (`reset_method=nvidia-smi`); NVML is shut down
around the nvidia-smi run so the sidecar itself does not hold the device. The post-check finds the GPU
by UUID again and requires zero volatile uncorrected ECC errors and a readable temperature.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from remediator.sidecar import nvml as nv
from remediator.sidecar.inventory import GpuNotFound, find_handle
from remediator.sidecar.nvml import Nvml, NvmlError
from remediator.sidecar.pods import process_owners
from remediator.sidecar.problems import Problem
from remediator.sidecar.schemas import PostCheck, ResetAnswer

__all__ = ["ResetConfig", "post_check", "reset_gpu"]


@dataclass(frozen=True)
class ResetConfig:
    method: Literal["nvml", "nvidia-smi"]
    nvidia_smi: Path
    timeout: float
    proc_root: Path
    # How long the post-check waits for the GPU to reappear after the reset.
    settle_seconds: float = 10.0


def post_check(nvml: Nvml, uuid: str) -> PostCheck:
    """What the GPU looks like now: found by UUID, volatile uncorrected ECC, temperature."""
    problems: list[str] = []
    try:
        handle = find_handle(nvml, uuid)
    except GpuNotFound:
        return PostCheck(uuid=uuid, found=False, healthy=False, problems=[f"{uuid} not found after reset"])
    except NvmlError as exc:
        return PostCheck(uuid=uuid, found=False, healthy=False, problems=[f"{uuid} not reachable after reset: {exc}"])
    index = nvml.index(handle)
    try:
        uncorrected: int | None = nvml.ecc_errors(handle, "uncorrected", "volatile")
        if uncorrected:
            problems.append(f"{uncorrected} volatile uncorrected ECC errors")
    except NvmlError as exc:
        uncorrected = None
        if exc.code != nv.NOT_SUPPORTED:
            problems.append(f"ECC counters unreadable: {exc}")
    try:
        temperature: int | None = nvml.temperature(handle)
    except NvmlError as exc:
        temperature = None
        problems.append(f"temperature unreadable: {exc}")
    return PostCheck(
        uuid=uuid,
        found=True,
        index=index,
        ecc_volatile_uncorrected=uncorrected,
        temperature_c=temperature,
        healthy=not problems,
        problems=problems,
    )


def _wait_for(nvml: Nvml, uuid: str, settle_seconds: float, sleep: Callable[[float], None]) -> PostCheck:
    deadline = time.monotonic() + settle_seconds
    while True:
        result = post_check(nvml, uuid)
        if result.found or time.monotonic() >= deadline:
            return result
        sleep(0.5)


def _nvidia_smi_reset(nvml: Nvml, config: ResetConfig, uuid: str) -> dict[str, Any]:
    argv = [str(config.nvidia_smi), "--gpu-reset", "-i", uuid]
    nvml.shutdown()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=config.timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Problem(502, f"nvidia-smi reset of {uuid} failed: {exc}", details={"argv": argv}) from exc
    finally:
        nvml.init()
    if done.returncode != 0:
        raise Problem(
            502,
            f"nvidia-smi reset of {uuid} exited {done.returncode}",
            details={"argv": argv, "output": (done.stdout + done.stderr)[-2000:]},
        )
    return {"argv": argv, "output": (done.stdout + done.stderr)[-2000:]}


def reset_gpu(
    nvml: Nvml, config: ResetConfig, uuid: str, dry_run: bool, sleep: Callable[[float], None] = time.sleep
) -> ResetAnswer:
    """Reset the GPU unless a process uses it (Problem 409 listing them); report the post-check."""
    handle = find_handle(nvml, uuid)
    processes = process_owners(config.proc_root, nvml.compute_processes(handle))
    if processes:
        raise Problem(
            409,
            f"{uuid} is in use by {len(processes)} process(es); refusing to reset",
            details={"processes": processes},
        )
    if dry_run:
        return ResetAnswer(uuid=uuid, dry_run=dry_run, method=config.method, processes=[],
                           changed=False, message=f"would reset {uuid} with {config.method}")
    nvidia_smi = _nvidia_smi_reset(nvml, config, uuid) if config.method == "nvidia-smi" else None
    if nvidia_smi is None:
        nvml.reset(handle)
    check = _wait_for(nvml, uuid, config.settle_seconds, sleep)
    result = ResetAnswer(
        uuid=uuid,
        dry_run=dry_run,
        method=config.method,
        processes=[],
        changed=True,
        post_check=check,
        healthy=check.healthy,
        message=f"reset {uuid}; " + ("healthy afterwards" if check.healthy else "; ".join(check.problems)),
    )
    if nvidia_smi is not None:
        result.nvidia_smi = nvidia_smi
    return result

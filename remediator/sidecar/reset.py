"""GPU reset: refuse while anything holds the GPU, reset, then check the GPU came back healthy.

Holders are the GPU's compute processes (NVML), every process with its device files open (/proc/*/fd:
the DCGM host engine, nvidia-persistenced, the device plugin, Fabric Manager, ...; remediator/sidecar/
holders.py) and persistence mode. The refusal (409) names each. Persistence mode is turned off only when the
request says so (`persistence_off`, sent by the reset step's operand handling), and turned on again after
the reset; nvidia-persistenced then releases the GPU, so its own hold does not count in that case.

Two ways to reset: NVML's drain / remove / rediscover sequence (`reset_method=nvml`, the default) or
`nvidia-smi --gpu-reset -i <uuid>` run as an argument list (`reset_method=nvidia-smi`); NVML is shut down
around the nvidia-smi run so the sidecar itself does not hold the device. The post-check finds the GPU
by UUID again and requires zero volatile uncorrected ECC errors and a readable temperature.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from remediator.domain.json_values import JsonObject
from remediator.errors import GpuNotFound
from remediator.sidecar import nvml as nv
from remediator.sidecar.holders import describe_holder, find_holders
from remediator.sidecar.inventory import find_handle
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


def _nvidia_smi_reset(nvml: Nvml, config: ResetConfig, uuid: str) -> JsonObject:
    argv = [str(config.nvidia_smi), "--gpu-reset", "-i", uuid]
    nvml.shutdown()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=config.timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Problem(502, f"nvidia-smi reset of {uuid} failed: {exc}", details={"argv": [*argv]}) from exc
    finally:
        nvml.init()
    if done.returncode != 0:
        raise Problem(
            502,
            f"nvidia-smi reset of {uuid} exited {done.returncode}",
            details={"argv": [*argv], "output": (done.stdout + done.stderr)[-2000:]},
        )
    return {"argv": [*argv], "output": (done.stdout + done.stderr)[-2000:]}


def _persistence(nvml: Nvml, handle: nv.DeviceHandle) -> bool:
    try:
        return nvml.persistence_mode(handle)
    except NvmlError as exc:
        if exc.code == nv.NOT_SUPPORTED:
            return False
        raise


def _minor(nvml: Nvml, handle: nv.DeviceHandle) -> int:
    try:
        return nvml.minor_number(handle)
    except NvmlError as exc:
        if exc.code == nv.NOT_SUPPORTED:
            return nvml.index(handle)
        raise


def holders_of(
    nvml: Nvml, config: ResetConfig, handle: nv.DeviceHandle, *, persistence_off: bool
) -> tuple[list[JsonObject], list[JsonObject], bool, list[int]]:
    """(compute processes, other holders, persistence mode on, pids whose descriptors were unreadable).

    With `persistence_off`, persistence mode and nvidia-persistenced are left out of the holders (the reset
    turns persistence mode off, and the daemon then lets the GPU go)."""
    processes = process_owners(config.proc_root, nvml.compute_processes(handle))
    found, unreadable = find_holders(config.proc_root, _minor(nvml, handle), exclude={os.getpid()})
    compute = {p["pid"] for p in processes}
    holders = [h.as_dict() for h in found
               if h.pid not in compute and not (persistence_off and h.kind == "persistenced")]
    persistent = _persistence(nvml, handle)
    if persistent and not persistence_off:
        holders.append({"kind": "persistence-mode", "files": []})
    return processes, holders, persistent, unreadable


def _refusal(uuid: str, processes: list[JsonObject], holders: list[JsonObject]) -> Problem:
    named = [describe_holder({**p, "program": "(compute)", "kind": "process"}) for p in processes]
    named += [describe_holder(h) for h in holders]
    return Problem(
        409,
        f"{uuid} is in use by {len(named)} process(es) or setting(s): {'; '.join(named)}; refusing to reset",
        details={"processes": [*processes], "holders": [*holders]},
    )


def reset_gpu(
    nvml: Nvml,
    config: ResetConfig,
    uuid: str,
    dry_run: bool,
    sleep: Callable[[float], None] = time.sleep,
    *,
    persistence_off: bool = False,
) -> ResetAnswer:
    """Reset the GPU unless anything holds it (Problem 409 naming each holder); report the post-check."""
    handle = find_handle(nvml, uuid)
    processes, holders, persistent, unreadable = holders_of(nvml, config, handle, persistence_off=persistence_off)
    if processes or holders:
        raise _refusal(uuid, processes, holders)
    if dry_run:
        return ResetAnswer(uuid=uuid, dry_run=dry_run, method=config.method, processes=[],
                           changed=False, message=f"would reset {uuid} with {config.method}")
    persistence: JsonObject | None = None
    if persistent and persistence_off:
        nvml.set_persistence_mode(handle, False)
        persistence = {"was": True, "turned_off": True, "restored": False}
    try:
        nvidia_smi = _nvidia_smi_reset(nvml, config, uuid) if config.method == "nvidia-smi" else None
        if nvidia_smi is None:
            nvml.reset(handle)
        check = _wait_for(nvml, uuid, config.settle_seconds, sleep)
    finally:
        if persistence is not None:
            persistence["restored"] = _restore_persistence(nvml, uuid)
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
    if persistence is not None:
        result.persistence_mode = persistence
    if unreadable:
        result.message += f"; descriptors of {len(unreadable)} process(es) unreadable: {unreadable[:10]}"
    return result


def _restore_persistence(nvml: Nvml, uuid: str) -> bool:
    """Persistence mode on again for the GPU (found anew by UUID after the reset); False when it cannot be."""
    try:
        nvml.set_persistence_mode(find_handle(nvml, uuid), True)
    except (GpuNotFound, NvmlError):
        return False
    return True

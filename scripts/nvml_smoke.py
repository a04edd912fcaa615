"""Read-only smoke test of remediator/sidecar/nvml.py on a real GPU, plus the sidecar's dry-run paths.

Runs every read of `Nvml` against GPU 0 (or --index), times each call, then runs the DRY-RUN of a power
limit change and of a reset. Before anything runs, every NVML entry point that changes a GPU (set*, reset,
drain, remove, discover, clear*) is replaced by a guard that raises, at the level where pynvml looks up C
symbols, so a bug here cannot change the GPU. Optionally (--bench) it also times GET /v1/gpus through a
real sidecar on 127.0.0.1 next to the raw NVML reads the endpoint makes. Prints JSON.

    PYTHONPATH=. python scripts/nvml_smoke.py [--index 0] [--bench 200] [--out smoke.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from remediator.sidecar.nvml import Nvml, NvmlError

FORBIDDEN_PREFIXES = (
    "nvmlDeviceSet",
    "nvmlDeviceReset",
    "nvmlDeviceClear",
    "nvmlDeviceModify",
    "nvmlGpuInstance",
)
FORBIDDEN_NAMES = {
    "nvmlDeviceRemoveGpu",
    "nvmlDeviceRemoveGpu_v2",
    "nvmlDeviceDiscoverGpus",
    "nvmlDeviceCreateGpuInstance",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlUnitSetLedState",
    "nvmlSystemSetConfComputeGpusReadyState",
}
blocked: list[str] = []


class MutationBlocked(RuntimeError):
    """A GPU-changing NVML entry point was reached; nothing was called."""


def install_guard() -> None:
    """Refuse every mutating symbol lookup (pynvml fetches each C function through this one helper)."""
    original = pynvml._nvmlGetFunctionPointer

    def guarded(name: str) -> Any:
        if name in FORBIDDEN_NAMES or name.startswith(FORBIDDEN_PREFIXES):
            blocked.append(name)
            raise MutationBlocked(f"refused to call {name}: this script never changes a GPU")
        return original(name)

    pynvml._nvmlGetFunctionPointer = guarded
    for cached in list(pynvml._nvmlGetFunctionPointer_cache):
        if cached in FORBIDDEN_NAMES or cached.startswith(FORBIDDEN_PREFIXES):
            del pynvml._nvmlGetFunctionPointer_cache[cached]
    for attr in (
        "nvmlDeviceSetPowerManagementLimit",
        "nvmlDeviceModifyDrainState",
        "nvmlDeviceRemoveGpu",
        "nvmlDeviceDiscoverGpus",
        "nvmlDeviceResetGpuLockedClocks",
    ):

        def refuse(*args: Any, _name: str = attr) -> None:
            blocked.append(_name)
            raise MutationBlocked(f"refused to call {_name}: this script never changes a GPU")

        setattr(pynvml, attr, refuse)


def self_test_guard(nvml: Nvml, handle: Any) -> dict[str, Any]:
    """Prove the guard holds: both mutations must be refused before reaching the driver."""
    results = {}
    for label, call in (
        ("set_power_limit_mw", lambda: nvml.set_power_limit_mw(handle, 1)),
        ("reset", lambda: nvml.reset(handle)),
    ):
        try:
            call()
            results[label] = "NOT BLOCKED"
        except MutationBlocked as exc:
            results[label] = f"blocked ({exc})"
    for symbol in (
        "nvmlDeviceRemoveGpu_v2",
        "nvmlDeviceSetPowerManagementLimit",
        "nvmlDeviceResetGpuLockedClocks",
    ):
        try:
            pynvml._nvmlGetFunctionPointer(symbol)
            results[symbol] = "NOT BLOCKED"
        except MutationBlocked:
            results[symbol] = "blocked"
    if any(v == "NOT BLOCKED" for v in results.values()):
        raise SystemExit(f"guard failed: {results}")
    return results


def timed(call: Callable[[], Any], repeat: int = 20) -> dict[str, Any]:
    """Value of the first call and per-call latency (median/min/max in microseconds over `repeat`)."""
    samples = []
    value: Any = None
    error: str | None = None
    for i in range(repeat):
        start = time.perf_counter()
        try:
            result = call()
        except NvmlError as exc:
            result, error = None, f"NVML_ERROR_{exc.name}"
        samples.append((time.perf_counter() - start) * 1e6)
        if i == 0:
            value = result
    out = {
        "value": value if error is None else None,
        "median_us": round(statistics.median(samples), 1),
        "min_us": round(min(samples), 1),
        "max_us": round(max(samples), 1),
    }
    if error:
        out["error"] = error
    return out


def jsonable(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {k: jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def reads(nvml: Nvml, handle: Any) -> dict[str, Any]:
    calls: dict[str, Callable[[], Any]] = {
        "driver_version": nvml.driver_version,
        "nvml_version": nvml.nvml_version,
        "device_count": nvml.device_count,
        "index": lambda: nvml.index(handle),
        "uuid": lambda: nvml.uuid(handle),
        "name": lambda: nvml.name(handle),
        "pci_bus_id": lambda: nvml.pci_bus_id(handle),
        "temperature": lambda: nvml.temperature(handle),
        "temperature_threshold.slowdown": lambda: nvml.temperature_threshold(handle, "slowdown"),
        "temperature_threshold.shutdown": lambda: nvml.temperature_threshold(handle, "shutdown"),
        "ecc_mode": lambda: nvml.ecc_mode(handle),
        "ecc.volatile.corrected": lambda: nvml.ecc_errors(handle, "corrected", "volatile"),
        "ecc.volatile.uncorrected": lambda: nvml.ecc_errors(handle, "uncorrected", "volatile"),
        "ecc.aggregate.corrected": lambda: nvml.ecc_errors(handle, "corrected", "aggregate"),
        "ecc.aggregate.uncorrected": lambda: nvml.ecc_errors(handle, "uncorrected", "aggregate"),
        "remapped_rows": lambda: nvml.remapped_rows(handle),
        "retired_pages": lambda: nvml.retired_pages(handle),
        "mig_mode": lambda: nvml.mig_mode(handle),
        "mig_device_uuids": lambda: nvml.mig_device_uuids(handle),
        "compute_processes": lambda: nvml.compute_processes(handle),
        "power_usage_mw": lambda: nvml.power_usage_mw(handle),
        "power_limit_mw": lambda: nvml.power_limit_mw(handle),
        "default_power_limit_mw": lambda: nvml.default_power_limit_mw(handle),
        "power_limit_constraints_mw": lambda: nvml.power_limit_constraints_mw(handle),
        "enforced_power_limit_mw": lambda: nvml.enforced_power_limit_mw(handle),
        "handle_by_uuid": lambda: bool(nvml.handle_by_uuid(nvml.uuid(handle))),
    }
    out = {}
    for name, call in calls.items():
        result = timed(call)
        out[name] = {**result, "value": jsonable(result["value"])}
    return out


def dry_runs(nvml: Nvml, uuid: str) -> dict[str, Any]:
    from remediator.sidecar.power import set_power_limit
    from remediator.sidecar.reset import ResetConfig, reset_gpu
    from remediator.sidecar.schemas import PowerLimitRequest
    from remediator.sidecar.state import PowerStateStore

    store = PowerStateStore(Path(tempfile.mkdtemp()) / "power-state.json")
    out: dict[str, Any] = {}
    for label, pct in (("power_limit_50pct", 50.0), ("power_limit_100pct", 100.0)):
        start = time.perf_counter()
        request = PowerLimitRequest(percent_of_default=pct, dry_run=True)
        out[label] = set_power_limit(nvml, store, uuid, request).model_dump(mode="json", exclude_unset=True)
        out[label]["latency_ms"] = round((time.perf_counter() - start) * 1e3, 3)
    assert not store.path.exists(), "a dry run wrote the state file"
    config = ResetConfig(
        method="nvml", nvidia_smi=Path("/usr/bin/nvidia-smi"), timeout=1, proc_root=Path("/proc")
    )
    start = time.perf_counter()
    try:
        out["reset"] = reset_gpu(nvml, config, uuid, dry_run=True).model_dump(mode="json", exclude_unset=True)
    except Exception as exc:  # a 409 (processes on the GPU) is a valid dry-run answer
        out["reset"] = {"refused": str(exc), "details": getattr(exc, "details", None)}
    out["reset"]["latency_ms"] = round((time.perf_counter() - start) * 1e3, 3)
    return out


def bench_http(nvml: Nvml, requests: int) -> dict[str, Any]:
    """GET /v1/gpus through a real sidecar (uvicorn, 127.0.0.1) next to the raw NVML snapshot."""
    import socket
    import threading

    import httpx
    import uvicorn

    from remediator.sidecar.app import create_app
    from remediator.sidecar.inventory import snapshot_all
    from remediator.sidecar.settings import SidecarSettings

    raw = []
    for _ in range(requests):
        start = time.perf_counter()
        snapshot_all(nvml)
        raw.append((time.perf_counter() - start) * 1e3)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = Path(tempfile.mkdtemp())
    settings = SidecarSettings(
        sidecar_token="bench", state_file=tmp / "state.json", podresources_socket=tmp / "none"
    )
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    http_ms = []
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer bench"}
    ) as client:
        for _ in range(10):
            client.get("/v1/gpus").raise_for_status()
        for _ in range(requests):
            start = time.perf_counter()
            client.get("/v1/gpus").raise_for_status()
            http_ms.append((time.perf_counter() - start) * 1e3)
    server.should_exit = True
    thread.join(timeout=10)

    def summary(samples: list[float]) -> dict[str, float]:
        ordered = sorted(samples)
        return {
            "median_ms": round(statistics.median(ordered), 3),
            "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1], 3),
            "p99_ms": round(ordered[max(0, int(len(ordered) * 0.99) - 1)], 3),
            "min_ms": round(ordered[0], 3),
        }

    return {"requests": requests, "raw_nvml_snapshot_all": summary(raw), "http_get_v1_gpus": summary(http_ms)}


def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--bench", type=int, default=0, help="requests for the HTTP benchmark (0: skip)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    install_guard()
    nvml = Nvml()
    start = time.perf_counter()
    nvml.init()
    init_ms = (time.perf_counter() - start) * 1e3
    handle = nvml.handle_by_index(args.index)
    uuid = nvml.uuid(handle)
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "gpu": nvml.name(handle),
        "uuid": uuid,
        "driver_version": nvml.driver_version(),
        "nvml_version": nvml.nvml_version(),
        "nvidia_ml_py_version": _package_version("nvidia-ml-py"),
        "init_ms": round(init_ms, 3),
        "reads": reads(nvml, handle),
    }
    report["dry_runs"] = dry_runs(nvml, uuid)
    report["guard_self_test"] = self_test_guard(nvml, handle)
    report["blocked_mutations"] = blocked
    _emit(report, args.out)
    if args.bench:
        try:
            report["bench"] = bench_http(nvml, args.bench)
        except Exception as exc:
            report["bench_error"] = repr(exc)
            _emit(report, args.out)
            raise
        report["blocked_mutations"] = blocked
        _emit(report, args.out)
    print(json.dumps(report, indent=2, default=str))
    return 0


def _emit(report: dict[str, Any], out: Path | None) -> None:
    if out is not None:
        out.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main())

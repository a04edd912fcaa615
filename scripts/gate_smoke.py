"""Read-only run of the validation gate's NVML reads and checks on a real GPU (no dcgmi, nothing changed).

Installs nvml_smoke's guard (every GPU-changing NVML entry point refused at symbol lookup) before NVML is
touched, reads what the gate reads (PCIe link, clock-event reasons, recovery action, retired-page and
row-remap state, ECC, temperature) with per-call timings, then runs the gate's NVML checks when pydantic is
importable. Prints JSON.

    PYTHONPATH=. python scripts/gate_smoke.py [--index 0] [--out gate.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvml_smoke import blocked, install_guard, jsonable, self_test_guard, timed

from remediator.sidecar.nvml import Nvml


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    install_guard()
    nvml = Nvml()
    nvml.init()
    handle = nvml.handle_by_index(args.index)
    report: dict[str, Any] = {"uuid": nvml.uuid(handle), "driver": nvml.driver_version(), "reads": {}}
    for name, call in {
        "pcie_link": lambda: nvml.pcie_link(handle),
        "gpu_max_pcie_generation": lambda: nvml.gpu_max_pcie_generation(handle),
        "clock_event_reasons": lambda: nvml.clock_event_reasons(handle),
        "recovery_action": lambda: nvml.recovery_action(handle),
        "retired_pages_pending": lambda: nvml.retired_pages_pending(handle),
        "remapped_rows": lambda: nvml.remapped_rows(handle),
        "ecc_volatile_uncorrected": lambda: nvml.ecc_errors(handle, "uncorrected", "volatile"),
        "ecc_aggregate_uncorrected": lambda: nvml.ecc_errors(handle, "uncorrected", "aggregate"),
        "temperature": lambda: nvml.temperature(handle),
        "temperature_slowdown": lambda: nvml.temperature_threshold(handle, "slowdown"),
    }.items():
        report["reads"][name] = timed(call)
    try:
        from remediator.sidecar.schemas import ValidateRequest
        from remediator.sidecar.validation import nvml_checks
    except ImportError as exc:
        report["gate"] = {"skipped": f"cannot import the gate: {exc}"}
    else:
        uuid = report["uuid"]
        started = time.perf_counter()
        gate = nvml_checks(nvml, uuid, ValidateRequest())
        first_ms = (time.perf_counter() - started) * 1000
        runs = []
        for _ in range(20):
            started = time.perf_counter()
            nvml_checks(nvml, uuid, ValidateRequest())
            runs.append((time.perf_counter() - started) * 1000)
        runs.sort()
        report["gate"] = {
            "checks": [c.model_dump() for c in gate.checks],
            "first_ms": round(first_ms, 3),
            "median_ms": round(runs[len(runs) // 2], 3),
            "max_ms": round(runs[-1], 3),
        }
    report["dcgmi_on_path"] = shutil.which("dcgmi")
    report["bug_report_on_path"] = shutil.which("nvidia-bug-report.sh")
    report["guard"] = self_test_guard(nvml, handle)
    report["blocked_outside_self_test"] = [b for b in blocked if b not in (
        "nvmlDeviceSetPowerManagementLimit", "nvmlDeviceModifyDrainState", "nvmlDeviceRemoveGpu_v2",
        "nvmlDeviceResetGpuLockedClocks")]
    nvml.shutdown()
    text = json.dumps(jsonable(report), indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

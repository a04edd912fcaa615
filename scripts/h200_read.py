"""Read-only check of the sidecar detector's read paths on a real GPU node; prints JSON.

Runs, for every GPU: the temperature thresholds (slowdown, shutdown, GPU max, memory max), remapped-row
state, PCIe link generation/width (current and max), the NVML recovery-action field, the node health
read the detector exports (`node_health.read_node_health`); then whether the kernel log is readable and
what the detector's parser makes of its NVRM/SXid lines; then registers an NVML event set for Xid
critical errors (registration changes nothing on a GPU), waits briefly and frees it. The same guard as
scripts/nvml_smoke.py refuses every mutating NVML entry point before anything runs.

    PYTHONPATH=. python scripts/h200_read.py [--kmsg /dev/kmsg] [--out read.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvml_smoke import blocked, install_guard

from remediator.sidecar.kmsg import SxidEvent, XidEvent, parse_event, parse_record
from remediator.sidecar.node_health import read_node_health
from remediator.sidecar.nvml import DeviceHandle, Nvml, NvmlError


def attempt(call: Any) -> Any:
    try:
        value = call()
    except NvmlError as exc:
        return {"error": f"NVML_ERROR_{exc.name}"}
    if hasattr(value, "__dataclass_fields__"):
        return {k: getattr(value, k) for k in value.__dataclass_fields__}
    return value


def gpu_reads(nvml: Nvml, handle: DeviceHandle) -> dict[str, Any]:
    return {
        "uuid": attempt(lambda: nvml.uuid(handle)),
        "name": attempt(lambda: nvml.name(handle)),
        "pci_bus_id": attempt(lambda: nvml.pci_bus_id(handle)),
        "threshold_slowdown_c": attempt(lambda: nvml.temperature_threshold(handle, "slowdown")),
        "threshold_shutdown_c": attempt(lambda: nvml.temperature_threshold(handle, "shutdown")),
        "threshold_gpu_max_c": attempt(lambda: nvml.temperature_threshold(handle, "gpu_max")),
        "threshold_memory_max_c": attempt(lambda: nvml.temperature_threshold(handle, "memory_max")),
        "remapped_rows": attempt(lambda: nvml.remapped_rows(handle)),
        "pcie_link_gen_max_width_max": attempt(lambda: nvml.pcie_link(handle)),
        "recovery_action": attempt(lambda: nvml.recovery_action(handle)),
        "handle_by_pci_bus_id_same_uuid": attempt(
            lambda: nvml.uuid(nvml.handle_by_pci_bus_id(nvml.pci_bus_id(handle))) == nvml.uuid(handle)
        ),
    }


def kmsg_reads(path: Path, limit: int = 200_000) -> dict[str, Any]:
    out: dict[str, Any] = {"path": str(path)}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        out["readable"] = False
        out["error"] = exc.strerror
        return out
    out["readable"] = True
    records = overruns = 0
    first: str | None = None
    nvrm: list[str] = []
    events: list[dict[str, Any]] = []
    start = time.perf_counter()
    try:
        while records < limit:
            try:
                chunk = os.read(fd, 16384)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    overruns += 1
                    continue
                raise
            if not chunk:
                break
            for line in chunk.decode("utf-8", errors="replace").split("\n"):
                record = parse_record(line)
                if record is None:
                    continue
                records += 1
                first = first or line[:160]
                if "NVRM" in record.message or "nvswitch" in record.message:
                    if len(nvrm) < 20:
                        nvrm.append(line[:200])
                    event = parse_event(record.message)
                    if isinstance(event, (XidEvent, SxidEvent)):
                        events.append({"type": type(event).__name__, **event.__dict__})
    finally:
        os.close(fd)
    out.update(
        records=records,
        overruns=overruns,
        read_ms=round((time.perf_counter() - start) * 1e3, 2),
        first_record=first,
        nvrm_lines=nvrm,
        parsed_events=events,
    )
    return out


def event_set(nvml: Nvml, count: int) -> dict[str, Any]:
    handles = [nvml.handle_by_index(i) for i in range(count)]
    start = time.perf_counter()
    try:
        es, registered = nvml.xid_event_set(handles)
    except NvmlError as exc:
        return {"error": f"NVML_ERROR_{exc.name}"}
    out: dict[str, Any] = {
        "registered_gpus": registered,
        "create_register_ms": round((time.perf_counter() - start) * 1e3, 3),
    }
    try:
        start = time.perf_counter()
        out["wait_200ms"] = attempt(lambda: nvml.wait_xid(es, 200))
        out["wait_ms"] = round((time.perf_counter() - start) * 1e3, 1)
    finally:
        nvml.free_event_set(es)
        out["freed"] = True
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kmsg", type=Path, default=Path("/dev/kmsg"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    install_guard()
    nvml = Nvml()
    nvml.init()
    count = nvml.device_count()
    start = time.perf_counter()
    health = read_node_health(nvml)
    health_ms = (time.perf_counter() - start) * 1e3
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "driver_version": nvml.driver_version(),
        "nvml_version": nvml.nvml_version(),
        "gpus": [gpu_reads(nvml, nvml.handle_by_index(i)) for i in range(count)],
        "node_health": {
            "read_ms": round(health_ms, 3),
            "gpus": [
                {"uuid": g.gpu.uuid, "values": g.values, "process_memory_bytes": g.process_memory_bytes}
                for g in health.gpus
            ],
            "lost": [lost.__dict__ for lost in health.lost],
        },
        "kmsg": kmsg_reads(args.kmsg),
        "xid_event_set": event_set(nvml, count),
    }
    report["blocked_mutations"] = list(blocked)
    nvml.shutdown()
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

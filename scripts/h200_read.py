"""Read-only check of every NVML read the sidecar makes, the kernel log and the device-holder scan on a real GPU
node; prints JSON.

Runs, for every GPU, each read-only method of `remediator.sidecar.nvml.Nvml` once, timed (`GETTERS` below; a test
holds it to the class, so a new getter cannot be left out): identity, temperatures and thresholds, ECC mode and
counts, remapped rows, retired pages and their pending status, MIG, compute processes, power draw and limits,
persistence mode, the /dev/nvidia<N> minor, PCIe link, clock-event reasons, the recovery-action field and the
NVLink link count, link states and per-link error counters (every link 0..NVML_NVLINK_MAX_LINKS-1, raw, beside
what `Nvml.nvlink_errors` makes of them). Then the node health read the detector exports
(`node_health.read_node_health`); whether the kernel log is readable (opened O_RDONLY, never written) and what
the detector's parser makes of its records (Xid, SXid and each kernel-event kind it knows); the holder scan over
the real /proc (`holders.find_holders` for each GPU's minor: which processes hold /dev/nvidia*, this one
included, since NVML opened them); and an NVML event set for Xid critical errors (registration changes nothing
on a GPU), waited on briefly and freed. The same guard as scripts/nvml_smoke.py refuses every mutating NVML
entry point before anything runs; `blocked_mutations` lists any that was even looked up (none, normally).

    PYTHONPATH=. python scripts/h200_read.py [--kmsg /dev/kmsg] [--proc-root /proc] [--out read.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nvml_smoke import blocked, install_guard

from remediator.sidecar.holders import find_holders
from remediator.sidecar.kmsg import (
    KERNEL_EVENT_KINDS,
    GpuKernelEvent,
    SxidEvent,
    XidEvent,
    parse_event,
    parse_record,
)
from remediator.sidecar.node_health import read_node_health
from remediator.sidecar.nvml import (
    FI_DEV_GET_GPU_RECOVERY_ACTION,
    NVLINK_ERROR_COUNTERS,
    NVLINK_MAX_LINKS,
    DeviceHandle,
    Nvml,
    NvmlError,
)

# Methods of Nvml this script reads once per node (the rest of GETTERS is per GPU), the ones it never calls
# (they change a GPU, or start and end the library), and the event-set reads of `event_set`.
NODE_READS = ("driver_version", "nvml_version", "device_count", "handle_by_index")
EVENT_READS = ("xid_event_set", "wait_xid", "free_event_set")
NOT_CALLED = ("set_power_limit_mw", "set_persistence_mode", "reset")
LIFECYCLE = ("init", "shutdown", "initialized")


def jsonable(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {k: jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def attempt(call: Callable[[], Any]) -> Any:
    try:
        value = call()
    except NvmlError as exc:
        return {"error": f"NVML_ERROR_{exc.name}"}
    return jsonable(value)


def timed(call: Callable[[], Any]) -> dict[str, Any]:
    """{"value": ..., "us": ...} or {"error": "NVML_ERROR_...", "us": ...} of one call."""
    start = time.perf_counter()
    try:
        out: dict[str, Any] = {"value": jsonable(call())}
    except NvmlError as exc:
        out = {"error": f"NVML_ERROR_{exc.name}"}
    out["us"] = round((time.perf_counter() - start) * 1e6, 1)
    return out


def getters(nvml: Nvml, h: DeviceHandle) -> dict[str, Callable[[], Any]]:
    """Every read-only Nvml method as the sidecar calls it for one GPU, keyed `<method>[.<argument>]`."""
    return {
        "index": lambda: nvml.index(h),
        "uuid": lambda: nvml.uuid(h),
        "name": lambda: nvml.name(h),
        "pci_bus_id": lambda: nvml.pci_bus_id(h),
        "handle_by_uuid": lambda: nvml.uuid(nvml.handle_by_uuid(nvml.uuid(h))) == nvml.uuid(h),
        "handle_by_pci_bus_id": lambda: nvml.uuid(nvml.handle_by_pci_bus_id(nvml.pci_bus_id(h))) == nvml.uuid(h),
        "serial": lambda: nvml.serial(h),
        "board_part_number": lambda: nvml.board_part_number(h),
        "vbios_version": lambda: nvml.vbios_version(h),
        "temperature": lambda: nvml.temperature(h),
        "temperature_threshold.slowdown": lambda: nvml.temperature_threshold(h, "slowdown"),
        "temperature_threshold.shutdown": lambda: nvml.temperature_threshold(h, "shutdown"),
        "temperature_threshold.gpu_max": lambda: nvml.temperature_threshold(h, "gpu_max"),
        "temperature_threshold.memory_max": lambda: nvml.temperature_threshold(h, "memory_max"),
        "ecc_mode": lambda: nvml.ecc_mode(h),
        "ecc_errors.uncorrected.volatile": lambda: nvml.ecc_errors(h, "uncorrected", "volatile"),
        "ecc_errors.corrected.volatile": lambda: nvml.ecc_errors(h, "corrected", "volatile"),
        "ecc_errors.uncorrected.aggregate": lambda: nvml.ecc_errors(h, "uncorrected", "aggregate"),
        "ecc_errors.corrected.aggregate": lambda: nvml.ecc_errors(h, "corrected", "aggregate"),
        "remapped_rows": lambda: nvml.remapped_rows(h),
        "retired_pages": lambda: nvml.retired_pages(h),
        "retired_pages_pending": lambda: nvml.retired_pages_pending(h),
        "mig_mode": lambda: nvml.mig_mode(h),
        "mig_device_uuids": lambda: nvml.mig_device_uuids(h),
        "mig_device_of_instance.1": lambda: nvml.mig_device_of_instance(h, 1),
        "compute_processes": lambda: nvml.compute_processes(h),
        "power_usage_mw": lambda: nvml.power_usage_mw(h),
        "power_limit_mw": lambda: nvml.power_limit_mw(h),
        "default_power_limit_mw": lambda: nvml.default_power_limit_mw(h),
        "power_limit_constraints_mw": lambda: nvml.power_limit_constraints_mw(h),
        "enforced_power_limit_mw": lambda: nvml.enforced_power_limit_mw(h),
        "persistence_mode": lambda: nvml.persistence_mode(h),
        "minor_number": lambda: nvml.minor_number(h),
        "pcie_link": lambda: nvml.pcie_link(h),
        "gpu_max_pcie_generation": lambda: nvml.gpu_max_pcie_generation(h),
        "clock_event_reasons": lambda: nvml.clock_event_reasons(h),
        f"field_value.{FI_DEV_GET_GPU_RECOVERY_ACTION}": lambda: nvml.field_value(h, FI_DEV_GET_GPU_RECOVERY_ACTION),
        "recovery_action": lambda: nvml.recovery_action(h),
        "nvlink_link_count": lambda: nvml.nvlink_link_count(h),
        "nvlink_active.0": lambda: nvml.nvlink_active(h, 0),
        "nvlink_error_counter.0.replay": lambda: nvml.nvlink_error_counter(h, 0, "replay"),
        "nvlink_errors": lambda: nvml.nvlink_errors(h),
    }


def nvlink_links(nvml: Nvml, h: DeviceHandle) -> dict[str, Any]:
    """Each link's state, and its error counters where the state call did not say the link is missing, raw."""
    links: dict[str, Any] = {}
    for link in range(NVLINK_MAX_LINKS):
        state = attempt(partial(nvml.nvlink_active, h, link))
        entry: dict[str, Any] = {"active": state}
        if not (isinstance(state, dict) and state.get("error") in ("NVML_ERROR_INVALID_ARGUMENT",)):
            entry["counters"] = {c: attempt(partial(nvml.nvlink_error_counter, h, link, c))
                                 for c in NVLINK_ERROR_COUNTERS}
        links[str(link)] = entry
    return {"max_links": NVLINK_MAX_LINKS, "links": links}


def gpu_reads(nvml: Nvml, handle: DeviceHandle) -> dict[str, Any]:
    reads = {name: timed(call) for name, call in getters(nvml, handle).items()}
    return {"reads": reads, "nvlink": nvlink_links(nvml, handle)}


def holder_scan(nvml: Nvml, count: int, proc_root: Path) -> dict[str, Any]:
    """Who holds each GPU's /dev/nvidia<minor> (and the shared control files), from the real /proc."""
    out: dict[str, Any] = {"proc_root": str(proc_root), "self_pid": os.getpid(), "gpus": []}
    for index in range(count):
        minor = attempt(partial(lambda i: nvml.minor_number(nvml.handle_by_index(i)), index))
        if not isinstance(minor, int):
            out["gpus"].append({"index": index, "minor": minor})
            continue
        start = time.perf_counter()
        holders, unreadable = find_holders(proc_root, minor)
        out["gpus"].append({
            "index": index,
            "minor": minor,
            "scan_ms": round((time.perf_counter() - start) * 1e3, 2),
            "holders": [h.as_dict() for h in holders],
            "unreadable_pids": unreadable,
            "self_found": any(h.pid == os.getpid() for h in holders),
        })
    try:
        out["pids_scanned"] = sum(1 for d in proc_root.iterdir() if d.name.isdigit())
    except OSError as exc:
        out["pids_scanned"] = f"error: {exc.strerror}"
    return out


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
    kinds = dict.fromkeys(KERNEL_EVENT_KINDS, 0)
    xids = sxids = 0
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
                if ("NVRM" in record.message or "nvswitch" in record.message) and len(nvrm) < 20:
                    nvrm.append(line[:200])
                event = parse_event(record.message)
                if isinstance(event, (XidEvent, SxidEvent, GpuKernelEvent)):
                    if len(events) < 50:
                        events.append({"type": type(event).__name__, **event.__dict__})
                    if isinstance(event, XidEvent):
                        xids += 1
                    elif isinstance(event, SxidEvent):
                        sxids += 1
                    else:
                        kinds[event.kind] = kinds.get(event.kind, 0) + 1
    finally:
        os.close(fd)
    out.update(
        records=records,
        overruns=overruns,
        read_ms=round((time.perf_counter() - start) * 1e3, 2),
        first_record=first,
        nvrm_lines=nvrm,
        parsed_events=events,
        xid_events=xids,
        sxid_events=sxids,
        kernel_event_kinds=kinds,
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
    parser.add_argument("--proc-root", type=Path, default=Path("/proc"))
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
        "device_count": count,
        "gpus": [gpu_reads(nvml, nvml.handle_by_index(i)) for i in range(count)],
        "node_health": {
            "read_ms": round(health_ms, 3),
            "gpus": [
                {"uuid": g.gpu.uuid, "values": g.values, "process_memory_bytes": g.process_memory_bytes,
                 "nvlink_errors": jsonable(g.nvlink_errors)}
                for g in health.gpus
            ],
            "lost": [lost.__dict__ for lost in health.lost],
        },
        "kmsg": kmsg_reads(args.kmsg),
        "holders": holder_scan(nvml, count, args.proc_root),
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

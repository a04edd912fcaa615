"""Benchmark: the node detector replaying a 1 GB kernel log, beside a plain regex search over the same file.

Writes a kernel log of `--size` bytes into a temporary directory, as /dev/kmsg hands records out
(`PRIORITY,SEQUENCE,TIMESTAMP_US,-;MESSAGE`): every `--every`th record is one of the lines of
tests/sidecar/data/kernel-log-lines.jsonl (its message, with the GPU moved to one of 64 PCI addresses, a
new PID and the record's own number and timestamp), the rest are ordinary kernel lines of other drivers
(network, storage, audit, USB, the GPU driver's own non-error lines). Then, each in a child process of its
own so its peak RSS is its own, it streams the file line by line through:

- `detector`: `Detector.handle_line` (facility check, anchored parse, counting into the metric series),
  `end_batch` every 2,000 lines, as the kernel log reader calls them;
- `regex`: `re.search("NVRM: Xid", line)` per line, counting the hits (what a plain grep-style watcher does:
  no record parsing, no facility, no SXid or other shapes).

Reports lines/s, MB/s, the child's peak RSS (ru_maxrss) and, in one more pass over the first
`--trace-mb` MB, tracemalloc's peak (tracemalloc slows every allocation, so it is measured apart). The file
is deleted afterwards. Prints a Markdown table and JSON.

    .venv/bin/python bench/kernel_log.py [--size-mb 1024] [--every 100] [--trace-mb 64] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._machine import describe  # noqa: E402

CORPUS = ROOT / "tests" / "sidecar" / "data" / "kernel-log-lines.jsonl"
FILLER = [
    "6,{s},{t},-;mlx5_core 0000:{b}:00.0 eth{n}: Link up",
    "6,{s},{t},-;IPv6: ADDRCONF(NETDEV_CHANGE): cali{h}: link becomes ready",
    "5,{s},{t},-;audit: type=1400 audit({t}.123:{s}): apparmor=\"DENIED\" operation=\"open\" profile=\"cri-"
    "containerd.apparmor.d\" name=\"/proc/{n}/mountinfo\" pid={p} comm=\"runc\"",
    "6,{s},{t},-;EXT4-fs (nvme{n}n1p1): mounted filesystem with ordered data mode. Quota mode: none.",
    "4,{s},{t},-;nvme nvme{n}: I/O {p} QID 12 timeout, completion polled",
    "6,{s},{t},-;usb 1-{n}: new high-speed USB device number {n} using xhci_hcd",
    "6,{s},{t},-;eth0: renamed from veth{h}",
    "6,{s},{t},-;cni0: port {n}(veth{h}) entered forwarding state",
    "4,{s},{t},-;TCP: request_sock_TCP: Possible SYN flooding on port 10250. Sending cookies.",
    "6,{s},{t},-;NVRM: GPU at PCI:0000:{b}:00: GPU-{h}-0000-4000-8000-000000000001",
    "6,{s},{t},-;nvidia-nvswitch{n}: open (major=510)",
    "6,{s},{t},-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build",
    "3,{s},{t},-;xfs filesystem being remounted at /var/lib/kubelet/pods/{h}/volumes supports timestamps until "
    "2038",
]
_PCI = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?=[.):\s]|$)")


def gpu_messages() -> list[str]:
    """The corpus lines' messages (without their stamps or record headers)."""
    from remediator.sidecar.kmsg import parse_record

    messages = []
    for line in CORPUS.read_text().splitlines():
        record = parse_record(json.loads(line)["line"])
        assert record is not None
        messages.append(record.message.replace("\\", "\\x5c").replace("\n", "\\x0a"))
    return messages


def generate(path: Path, size: int, every: int, seed: int = 7) -> dict[str, int]:
    """Write about `size` bytes of kernel records to `path`; returns how many lines and GPU lines."""
    rng = random.Random(seed)
    messages = gpu_messages()
    buses = [f"{d:04x}:{b:02x}:00" for d in (0, 1, 9) for b in rng.sample(range(1, 256), 22)][:64]
    written = lines = gpu = 0
    sequence = 1000
    stamp = 5_000_000
    with path.open("w", buffering=1 << 20) as out:
        chunk: list[str] = []
        while written < size:
            sequence += 1
            stamp += rng.randrange(1, 5000)
            if sequence % every == 0:
                message = _PCI.sub(rng.choice(buses), rng.choice(messages))
                message = re.sub(r"pid=\d+", f"pid={rng.randrange(1, 4_194_304)}", message)
                line = f"{rng.choice((3, 4))},{sequence},{stamp},-;{message}\n"
                gpu += 1
            else:
                line = rng.choice(FILLER).format(
                    s=sequence, t=stamp, b=f"{rng.randrange(256):02x}", n=rng.randrange(16),
                    p=rng.randrange(1, 4_194_304), h=f"{rng.getrandbits(32):08x}",
                ) + "\n"
            chunk.append(line)
            written += len(line)
            lines += 1
            if len(chunk) >= 10_000:
                out.write("".join(chunk))
                chunk.clear()
        out.write("".join(chunk))
    return {"lines": lines, "gpu_lines": gpu, "bytes": path.stat().st_size}


def run_detector(path: Path, limit: int | None, workdir: Path) -> dict[str, Any]:
    from remediator.sidecar.detector import Detector, DetectorConfig
    from remediator.sidecar.metrics import SidecarMetrics

    (workdir / "boot_id").write_text("bench-boot\n")
    metrics = SidecarMetrics()
    detector = Detector(DetectorConfig("bench-node", workdir / "state.json", workdir / "boot_id"), metrics)
    handle, end = detector.handle_line, detector.end_batch
    lines = 0
    read = 0
    started = time.perf_counter()
    with path.open(encoding="utf-8", errors="replace", buffering=1 << 20) as fh:
        for line in fh:
            handle(line)
            lines += 1
            if lines % 2000 == 0:
                end()
            if limit is not None:
                read += len(line)
                if read >= limit:
                    break
    end()
    seconds = time.perf_counter() - started
    counted = sum(s.value for family in metrics.registry.collect() for s in family.samples
                  if s.name in ("gpu_remediator_xid_events_total", "gpu_remediator_sxid_events_total",
                                "gpu_remediator_kernel_events_total"))
    return {"lines": lines, "seconds": seconds, "events": int(counted)}


def run_regex(path: Path, limit: int | None, workdir: Path) -> dict[str, Any]:
    search = re.compile(r"NVRM: Xid").search
    lines = hits = read = 0
    started = time.perf_counter()
    with path.open(encoding="utf-8", errors="replace", buffering=1 << 20) as fh:
        for line in fh:
            if search(line):
                hits += 1
            lines += 1
            if limit is not None:
                read += len(line)
                if read >= limit:
                    break
    seconds = time.perf_counter() - started
    return {"lines": lines, "seconds": seconds, "events": hits}


ROWS = {"detector": run_detector, "regex": run_regex}


def child(row: str, path: Path, trace_bytes: int) -> None:
    """One row, in this (child) process: a timed pass, then a tracemalloc pass over the first bytes."""
    with tempfile.TemporaryDirectory() as work:
        result = ROWS[row](path, None, Path(work))
        result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with tempfile.TemporaryDirectory() as work:
        tracemalloc.start()
        ROWS[row](path, trace_bytes, Path(work))
        result["tracemalloc_peak_mib"] = tracemalloc.get_traced_memory()[1] / (1 << 20)
        tracemalloc.stop()
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the generated kernel log")
    parser.add_argument("--every", type=int, default=100, help="one GPU line from the corpus every N records")
    parser.add_argument("--trace-mb", type=int, default=64, help="MB read in the tracemalloc pass")
    parser.add_argument("--smoke", action="store_true", help="a 4 MB log, for a quick check")
    parser.add_argument("--row", choices=sorted(ROWS), help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        child(args.row, args.file, args.trace_mb << 20)
        return
    size_mb = 4 if args.smoke else args.size_mb
    trace_mb = min(args.trace_mb, size_mb)
    with tempfile.TemporaryDirectory(prefix="kernel-log-bench-") as tmp:
        path = Path(tmp) / "kmsg.log"
        started = time.perf_counter()
        made = generate(path, size_mb << 20, args.every)
        made["generate_seconds"] = round(time.perf_counter() - started, 1)
        results: dict[str, Any] = {}
        for row in ("regex", "detector"):
            done = subprocess.run(
                [sys.executable, __file__, "--row", row, "--file", str(path), "--trace-mb", str(trace_mb)],
                check=True, capture_output=True, text=True,
            )
            results[row] = json.loads(done.stdout.strip().splitlines()[-1])
    mb = made["bytes"] / 1e6
    print(f"{made['lines']:,} lines, {mb:,.0f} MB, {made['gpu_lines']:,} GPU lines from the corpus\n")
    print("| row | lines/s | MB/s | events counted | peak RSS (MiB) | tracemalloc peak (MiB, first "
          f"{trace_mb} MB) |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in ("detector", "regex"):
        r = results[row]
        print(f"| {row} | {r['lines'] / r['seconds']:,.0f} | {mb / r['seconds']:,.1f} | {r['events']:,} | "
              f"{r['peak_rss_mib']:,.1f} | {r['tracemalloc_peak_mib']:,.2f} |")
    ratio = results["regex"]["seconds"] and results["detector"]["seconds"] / results["regex"]["seconds"]
    print(f"\ndetector time / regex time: {ratio:.2f}\n")
    print(json.dumps({
        "machine": describe().as_dict(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "log": made, "rows": results, "ratio": round(ratio, 3),
    }))


if __name__ == "__main__":
    main()

"""Benchmark: the node detector's per-line cost and memory with 20,000 distinct Xid series, beside older code.

The detector remembers recent (GPU, Xid) reports to count an event seen by both the kernel log and NVML
once. This feeds `--buses` x `--codes` distinct series (distinct GPU PCI addresses x Xid codes, one kernel
record each, as the kernel numbers them) through `Detector.handle_line`, the way the kernel log reader
does (`end_batch` every 2,000 lines), and reports the cost per line over the first and the last
`--block` lines (medians of `--repeat` runs, the two codes alternating), and memory (tracemalloc: peak
while feeding, what stays allocated after it, and the part of that allocated by the detector module
itself, i.e. without the metric series both keep; one more run, since tracemalloc slows every
allocation). The same run does the same for the detector of `--base` (`kmsg.py` and `detector.py` taken
from that commit with `git show` into a temporary module), so both rows come from one machine under one
load. The clock is synthetic (`--rate` lines per second), so every
line falls inside the dedupe window as in a real storm. Measures only; prints JSON.

    .venv/bin/python bench/detector.py [--base 5766c1f^] [--buses 200] [--codes 100] [--passes 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._machine import describe  # noqa: E402
from remediator.sidecar import detector as current_detector  # noqa: E402
from remediator.sidecar.metrics import SidecarMetrics  # noqa: E402

# The commit before the bounded dedupe memory (the code the issue measured at 1.5 ms per line).
DEFAULT_BASE = "5766c1f^"
BATCH = 2000


def load_base(commit: str, workdir: Path) -> ModuleType:
    """`detector.py` of `commit`, importing the `kmsg.py` of the same commit, as a module of its own."""

    def show(path: str) -> str:
        try:
            return subprocess.run(
                ["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
            ).stdout
        except subprocess.CalledProcessError as exc:
            raise SystemExit(f"cannot read {path} at {commit}: {exc.stderr.strip()}") from None

    (workdir / "base_kmsg.py").write_text(show("remediator/sidecar/kmsg.py"))
    source = show("remediator/sidecar/detector.py")
    if "from remediator.sidecar.kmsg import" not in source:
        raise SystemExit(f"detector.py at {commit} does not import remediator.sidecar.kmsg as expected")
    (workdir / "base_detector.py").write_text(
        source.replace("from remediator.sidecar.kmsg import", "from base_kmsg import")
    )
    sys.path.insert(0, str(workdir))
    spec = importlib.util.spec_from_file_location("base_detector", workdir / "base_detector.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["base_detector"] = module
    spec.loader.exec_module(module)
    return module


def make_lines(buses: int, codes: int, passes: int) -> list[str]:
    lines = []
    sequence = 0
    for _ in range(passes):
        for bus in range(buses):
            domain, bus_number = divmod(bus, 256)
            for code in range(1, codes + 1):
                sequence += 1
                lines.append(
                    f"4,{sequence},{sequence * 100},-;NVRM: Xid (PCI:{domain:04x}:{bus_number:02x}:00): {code}, "
                    f"pid=4242, name=python3, Ch 00000008"
                )
    return lines


class Clock:
    def __init__(self, rate: float) -> None:
        self.now = 1000.0
        self.step = 1.0 / rate

    def __call__(self) -> float:
        return self.now


def make_detector(module: ModuleType, workdir: Path, clock: Clock) -> Any:
    state = workdir / f"state-{module.__name__}-{time.monotonic_ns()}"
    state.mkdir()
    (state / "boot_id").write_text("bench-boot\n")
    config = module.DetectorConfig("bench-node", state / "state.json", state / "boot_id")
    return module.Detector(config, SidecarMetrics(), clock=clock)


def feed(detector: Any, lines: list[str], clock: Clock, block: int) -> list[float]:
    """Seconds per block of `block` lines."""
    blocks: list[float] = []
    started = time.perf_counter()
    for index, line in enumerate(lines, 1):
        clock.now += clock.step
        detector.handle_line(line)
        if index % BATCH == 0:
            detector.end_batch()
        if index % block == 0:
            now = time.perf_counter()
            blocks.append(now - started)
            started = now
    return blocks


def timed(module: ModuleType, lines: list[str], rate: float, block: int, workdir: Path) -> tuple[list[float], int]:
    gc.collect()
    clock = Clock(rate)
    detector = make_detector(module, workdir, clock)
    blocks = feed(detector, lines, clock, block)
    return blocks, len(detector._recent)


def measure(
    module: ModuleType, runs: list[tuple[list[float], int]], lines: list[str], rate: float, block: int, workdir: Path
) -> dict[str, Any]:
    """The median over `runs` of each timing, and memory from one more run under tracemalloc."""

    def median(values: list[float]) -> float:
        return statistics.median(values) / block * 1e6

    remembered = runs[-1][1]
    gc.collect()
    clock = Clock(rate)
    tracemalloc.start()
    detector = make_detector(module, workdir, clock)
    feed(detector, lines, clock, block)
    gc.collect()
    retained, peak = tracemalloc.get_traced_memory()
    own = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, str(module.__file__))])
    in_detector = sum(stat.size for stat in own.statistics("filename"))
    tracemalloc.stop()
    del detector
    return {
        "lines": len(lines),
        "timed_runs": len(runs),
        "us_per_line_first_block": round(median([blocks[0] for blocks, _ in runs]), 1),
        "us_per_line_last_block": round(median([blocks[-1] for blocks, _ in runs]), 1),
        "us_per_line_all": round(median([sum(blocks) / len(blocks) for blocks, _ in runs]), 1),
        "seconds_total": round(statistics.median([sum(blocks) for blocks, _ in runs]), 2),
        "dedupe_pairs_remembered": remembered,
        "tracemalloc_peak_mib": round(peak / 2**20, 2),
        "tracemalloc_retained_mib": round(retained / 2**20, 2),
        "retained_by_detector_module_mib": round(in_detector / 2**20, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=DEFAULT_BASE, help="commit whose detector is the baseline")
    parser.add_argument("--buses", type=int, default=200, help="distinct GPU PCI addresses")
    parser.add_argument("--codes", type=int, default=100, help="distinct Xid codes per address")
    parser.add_argument("--passes", type=int, default=1, help="times every series is reported")
    parser.add_argument("--rate", type=float, default=10_000.0, help="lines per second of the synthetic clock")
    parser.add_argument("--block", type=int, default=1000, help="lines per timed block")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each, alternating (medians reported)")
    args = parser.parse_args()
    if min(args.buses, args.codes, args.passes, args.block, args.repeat) < 1 or args.rate <= 0:
        parser.error("--buses, --codes, --passes, --block, --repeat and --rate must be positive")
    lines = make_lines(args.buses, args.codes, args.passes)
    if len(lines) < 2 * args.block:
        parser.error(f"{len(lines)} lines are fewer than two blocks of {args.block}")
    revision = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    base_revision = subprocess.run(
        ["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-detector-") as tmp:
        workdir = Path(tmp)
        base = load_base(args.base, workdir)
        runs: dict[str, list[tuple[list[float], int]]] = {"base": [], "current": []}
        for _ in range(args.repeat):  # alternating, so both see the same changes of load
            runs["base"].append(timed(base, lines, args.rate, args.block, workdir))
            runs["current"].append(timed(current_detector, lines, args.rate, args.block, workdir))
        results = {
            f"base {base_revision}": measure(base, runs["base"], lines, args.rate, args.block, workdir),
            f"current {revision} (working tree)": measure(
                current_detector, runs["current"], lines, args.rate, args.block, workdir
            ),
        }
    (base_row, current_row) = results.values()
    report = {
        "machine": describe().as_dict(),
        "series": args.buses * args.codes,
        "passes": args.passes,
        "results": results,
        "ratio_current_to_base": {
            key: round(current_row[key] / base_row[key], 3) if base_row[key] else None
            for key in ("us_per_line_last_block", "us_per_line_all", "tracemalloc_peak_mib",
                        "tracemalloc_retained_mib", "retained_by_detector_module_mib")
        },
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

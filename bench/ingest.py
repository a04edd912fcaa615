"""bench/ingest: webhook throughput with durable commit vs. a bare FastAPI endpoint that only parses.

Runs the servers on 127.0.0.1 in the same run, drives each with wrk (2 threads, 32 connections, ~2 KB
payloads with a fresh fingerprint per request) and prints requests/s, p50 and p99 side by side: the bare
endpoint, the controller as one process, and the controller with REMEDIATOR_WORKER_PROCESS=true (webhooks
in one process, decisions in another; `--no-worker-process` leaves that row out). With
--compare-fsync it also runs the controller with the intake at SQLite `synchronous=NORMAL` (no fsync per
commit, what "stored" meant before acknowledged batches had to survive a power cut), to show the fsync's cost.
Usage: python bench/ingest.py [--seconds 10] [--connections 32] [--compare-fsync] [--no-worker-process] [--smoke]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/ingest.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._machine import describe
from bench._servers import bare, controller, controller_database, free_port, stop, tree_rss_mb, wait_http

HERE = Path(__file__).resolve().parent
TOKEN = "bench-token"


def wrk(url: str, seconds: int, connections: int) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(HERE / "ingest.lua"), url],
        check=True, capture_output=True, text=True, env={"BENCH_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
    ).stdout
    m = re.search(r"RESULT requests=(\d+) duration_us=(\d+) errors_status=(\d+) p50_us=(\d+) p99_us=(\d+)", out)
    if not m:
        raise RuntimeError(f"unexpected wrk output:\n{out}")
    requests, duration, errors, p50, p99 = (int(g) for g in m.groups())
    return {"rps": requests / (duration / 1e6), "p50_ms": p50 / 1000, "p99_ms": p99 / 1000, "errors": errors,
            "requests": requests}


def alert_states(database: Path) -> dict[str, int]:
    """Stored alerts by state once the run ends: `new` ones were acknowledged but not yet decided, `spooled`
    ones acknowledged into the intake spool (store/intake_spool.py) and not yet moved into the database."""
    import sqlite3

    from remediator.store.intake_spool import spool_path

    with sqlite3.connect(database) as conn:
        states = {str(state): int(n) for state, n in conn.execute("SELECT state, count(*) FROM alerts GROUP BY state")}
    spool = spool_path(database)
    if spool.exists():
        with sqlite3.connect(spool) as conn:
            states["spooled"] = int(conn.execute("SELECT coalesce(sum(alert_count), 0) FROM spooled").fetchone()[0])
    return states


def tree_cpu_s(pid: int) -> list[float]:
    """CPU seconds (user + system) a process and each of its children (a worker process) have used so far."""
    import os

    def cpu(p: int) -> float:
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    children = [int(c) for task in Path(f"/proc/{pid}/task").glob("*")
                for c in (task / "children").read_text().split()]
    return [cpu(pid), *(cpu(c) for c in children)]


def undecided(states: dict[str, int]) -> int:
    """Acknowledged alerts no decision has closed yet: spooled, or stored `new` (claimed or not)."""
    return states.get("new", 0) + states.get("spooled", 0)


def decided(states: dict[str, int]) -> int:
    return sum(states.values()) - undecided(states) - states.get("repeat", 0)


def commit_latency(work: Path, synchronous: str, commits: int = 500) -> dict[str, float]:
    """Sequential one-alert webhook commits through the SQLite intake: what one fsync adds to a commit."""
    import asyncio
    import statistics
    import time

    import remediator.store.sqlite_intake as sqlite_intake
    from remediator.store.db import make_engine, make_sessionmaker, upgrade_sync
    from remediator.store.repository import Repository
    from tests.store.test_intake_store import payload

    url = f"sqlite+aiosqlite:///{work / f'commit-{synchronous}.db'}"
    upgrade_sync(url)

    async def run() -> list[float]:
        sqlite_intake.INTAKE_SYNCHRONOUS = synchronous
        engine = make_engine(url)
        repo = Repository(make_sessionmaker(engine))
        samples = []
        try:
            for i in range(commits):
                started = time.perf_counter()
                await repo.store_batch(payload(fingerprint=f"c{i}"))
                samples.append(time.perf_counter() - started)
        finally:
            await repo.close()
            await engine.dispose()
            sqlite_intake.INTAKE_SYNCHRONOUS = "FULL"
        return sorted(samples)

    samples = asyncio.run(run())
    return {"p50_ms": statistics.median(samples) * 1000, "p99_ms": samples[int(len(samples) * 0.99) - 1] * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--compare-fsync", action="store_true",
                        help="also run the controller with the intake at synchronous=NORMAL")
    parser.add_argument("--no-worker-process", action="store_true",
                        help="leave out the controller with REMEDIATOR_WORKER_PROCESS=true")
    parser.add_argument("--smoke", action="store_true", help="1 s a row, 8 connections, a 1 s warm-up: seconds")
    parser.add_argument("--rows", help="only these rows, comma-separated: bare,controller,process,normal "
                        "(e.g. `--rows process --seconds 60`: does the worker process decide as fast as webhooks come)")
    args = parser.parse_args()
    warm_up = 2
    if args.smoke:
        args.seconds, args.connections, warm_up = 1, 8, 1
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results: dict[str, dict[str, Any]] = {}
        env = {"REMEDIATOR_WEBHOOK_TOKEN": TOKEN, "REMEDIATOR_LOG_LEVEL": "WARNING"}
        names: tuple[str, ...] = ("bare", "controller", *(() if args.no_worker_process else ("process",)),
                                  *(("normal",) if args.compare_fsync else ()))
        if args.rows:
            names = tuple(n.strip() for n in args.rows.split(","))
            unknown = set(names) - {"bare", "controller", "process", "normal"}
            if unknown:
                parser.error(f"--rows: unknown {', '.join(sorted(unknown))} (bare, controller, process, normal)")
        for name in names:
            port = free_port()
            if name == "bare":
                proc = bare(port, work)
            else:
                worker = {"REMEDIATOR_WORKER_PROCESS": "true" if name == "process" else "false"}
                proc = controller(port, work, {**env, **worker},
                                  intake_synchronous="NORMAL" if name == "normal" else None)
            try:
                wait_http(f"http://127.0.0.1:{port}/docs")
                wrk(f"http://127.0.0.1:{port}", warm_up, args.connections)
                database = controller_database(work, port)
                before = alert_states(database) if name != "bare" else {}
                cpu_before = tree_cpu_s(proc.pid)
                results[name] = wrk(f"http://127.0.0.1:{port}", args.seconds, args.connections)
                cpu = [b - a for a, b in zip(cpu_before, tree_cpu_s(proc.pid), strict=False)]
                results[name]["rss"] = tree_rss_mb(proc.pid)  # at the end of the flood, before the stop
                if name != "bare":  # read while the controller runs: what it decided during the flood
                    after = alert_states(database)
                    results[name]["flood"] = {"decided": decided(after) - decided(before),
                                              "backlog": undecided(after), "spooled": after.get("spooled", 0),
                                              "cpu": cpu}
            finally:
                stop(proc)
            if name != "bare":
                results[name]["states"] = alert_states(controller_database(work, port))
        commits = {mode: commit_latency(work, mode) for mode in ("FULL", "NORMAL")} if args.compare_fsync else {}
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {describe().line()}; "
          f"wrk -t2 -c{args.connections} -d{args.seconds}s")
    print("| endpoint | req/s | p50 ms | p99 ms | non-2xx |")
    print("|---|---|---|---|---|")
    for name, label in (("bare", "bare FastAPI parse only (baseline)"),
                        ("controller", "POST /api/v1/alerts, durable commit (synchronous=FULL)"),
                        ("process", "the same, worker in its own process (REMEDIATOR_WORKER_PROCESS=true)"),
                        ("normal", "POST /api/v1/alerts, intake synchronous=NORMAL (no fsync)")):
        if name not in results:
            continue
        r = results[name]
        print(f"| {label} | {r['rps']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['errors']} |")
    for name, r in results.items():
        print(f"{name}: resident memory at the end of the flood {' + '.join(f'{mb:.0f}' for mb in r['rss'])} MB"
              + (" (web process + worker process)" if len(r["rss"]) > 1 else ""))
    for name in ("controller", "process", "normal"):
        if name in results:
            states = results[name]["states"]
            stored = sum(states.values())
            print(f"{name}: {stored} alerts stored (warm-up included), {decided(states)} decided by the worker "
                  f"before it stopped; by state: {dict(sorted(states.items()))}")
            flood = results[name]["flood"]
            print(f"{name}: during the {args.seconds} s flood {results[name]['rps']:.0f} acknowledged/s, "
                  f"{flood['decided'] / args.seconds:.0f} decided/s; at its end {flood['backlog']} acknowledged and "
                  f"undecided ({flood['spooled']} of them spooled); CPU seconds used in it: "
                  + " + ".join(f"{c:.1f}" for c in flood["cpu"])
                  + (" (web process + worker process)" if len(flood["cpu"]) > 1 else ""))
    for mode, c in commits.items():
        print(f"one-alert commit through the intake, synchronous={mode}: p50 {c['p50_ms']:.2f} ms, "
              f"p99 {c['p99_ms']:.2f} ms (500 sequential commits)")
    if "controller" in results and "bare" in results:
        print(f"throughput ratio controller/bare: {results['controller']['rps'] / results['bare']['rps']:.2f} "
              f"(target >= 0.6); controller p99 {results['controller']['p99_ms']:.1f} ms (target < 50 ms)")
    if "process" in results and "bare" in results:
        print(f"with the worker process: ratio {results['process']['rps'] / results['bare']['rps']:.2f}, p99 "
              f"{results['process']['p99_ms']:.1f} ms")


if __name__ == "__main__":
    main()

"""Every benchmark script starts the way its docstring says (`python bench/<name>.py`), from a checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_") and p.name != "bare_app.py"
)


def test_every_script_is_listed() -> None:
    assert {
        "ingest.py", "drain.py", "storm.py", "sidecar.py", "e2e.py", "reads.py", "fleet.py", "decide.py",
        "fleet_storm.py", "fleet_latency.py", "kube_client.py",
    } <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_runs_as_documented(script: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, f"bench/{script}", "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def smoke(script: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, f"bench/{script}", "--smoke", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=400, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def table(stdout: str) -> dict[str, str]:
    return {cells[1].strip(): cells[2].strip() for line in stdout.splitlines()
            if line.startswith("| ") and len(cells := line.split("|")) == 4}


def test_fleet_smoke_measures_both_inventories() -> None:
    """The CI form of bench/fleet.py: a small fleet, both inventories, a few seconds per phase."""
    stdout = smoke("fleet.py", "--seconds", "2")
    rows = [line for line in stdout.splitlines() if line.startswith("| list every") or line.startswith("| watch")]
    assert [row.split("|")[3].strip() for row in rows] == ["rest", "load", "rest", "load"]


def test_fleet_storm_smoke_reaches_the_breaker_and_frees_room() -> None:
    """The CI form of bench/fleet_storm.py (2 replicas on PostgreSQL): the breaker holds and held ones start."""
    rows = table(smoke("fleet_storm.py"))
    most, limit = rows["most nodes tainted at once (whole run)"].replace("(limit ", "").rstrip(")").split()
    assert int(most) == int(limit) == 20
    assert rows["pod evictions / pods evicted twice"].endswith("/ 0")
    assert rows["held by the breaker"] == "40"
    assert rows["reverted to free room / held started after"] == "3 / 3"
    assert rows["of those, among the oldest held"] == "3 of 3"  # room goes to the oldest held first
    assert "nodes quarantined per second up to the breaker" in rows


def test_fleet_latency_smoke_measures_both_clusters() -> None:
    """The CI form of bench/fleet_latency.py: the small cluster (baseline) and the fleet, same run."""
    rows = [line.split("|") for line in smoke("fleet_latency.py").splitlines() if line.startswith("| small")
            or line.startswith("| fleet")]
    assert [(r[1].strip(), r[2].strip()) for r in rows] == [("small", "16 / 128"), ("fleet", "400 / 3200")]


def test_kube_client_smoke_measures_both_sessions() -> None:
    """The CI form of bench/kube_client.py: the client's default session and the controller's, same run."""
    stdout = smoke("kube_client.py")
    rows = [line.split("|") for line in stdout.splitlines() if line.startswith("| 1 |")]
    assert [r[2].strip() for r in rows] == ["trust_env (client default)", "as the controller builds it"]
    # The header names the machine as bench/_machine.py reads it, not by its host name alone.
    assert f"{len(os.sched_getaffinity(0))} usable cores of" in stdout.splitlines()[0]
    assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in rows)


def test_ingest_smoke_measures_the_three_rows() -> None:
    """The baseline, one process and the worker process (webhooks spooled, then moved and decided)."""
    stdout = smoke("ingest.py")
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:6]]
            for line in stdout.splitlines() if line.startswith("| ") and "req/s" not in line}
    assert set(rows) == {
        "bare FastAPI parse only (baseline)", "POST /api/v1/alerts, durable commit (synchronous=FULL)",
        "the same, worker in its own process (REMEDIATOR_WORKER_PROCESS=true)",
    }
    for cells in rows.values():
        assert float(cells[0]) > 0 and cells[3] == "0", cells  # requests served, none refused
    assert "(web process + worker process)" in stdout
    assert "with the worker process: ratio" in stdout
    # The one-process row stays one process now that serve's default on a SQLite file is two.
    (memory,) = [line for line in stdout.splitlines() if line.startswith("controller: resident memory")]
    assert "worker process" not in memory
    for name in ("controller", "process"):  # decided against acknowledged, read while the flood's server runs
        assert re.search(rf"^{name}: during the 1 s flood \d+ acknowledged/s, \d+ decided/s; at its end \d+ ",
                         stdout, re.M), stdout


def test_decide_smoke_decides_every_alert() -> None:
    stdout = smoke("decide.py")
    assert "| decided (none left `new`) |" in stdout
    outcomes = dict(part.rsplit(" ", 1) for part in stdout.split("outcomes: ", 1)[1].strip().split(", "))
    assert sum(int(n) for n in outcomes.values()) == 500


def test_reads_smoke_measures_the_list_and_the_index() -> None:
    rows = [line.split("|") for line in smoke("reads.py").splitlines() if line.startswith("| list") or
            line.startswith("| UI index") or line.startswith("| audit ?remediation=ID")]
    # The audit of one remediation is timed on both stores (the baseline holds the remediation it names).
    assert len(rows) == 9 and rows[-1][1].strip() == "audit ?remediation=ID"
    for cells in rows:  # p50 / p99 ms on the baseline store and the filled one
        assert all(float(ms) > 0 for cell in cells[2:4] for ms in cell.split(" / ")), cells


def test_kernel_log_smoke_replays_through_the_detector_and_the_regex() -> None:
    stdout = smoke("kernel_log.py")
    rows = {cells[1].strip(): cells for line in stdout.splitlines()
            if line.startswith("| detector") or line.startswith("| regex") for cells in [line.split("|")]}
    assert set(rows) == {"detector", "regex"}
    detector_events, regex_hits = (int(rows[r][4].strip().replace(",", "")) for r in ("detector", "regex"))
    assert detector_events > regex_hits > 0  # the detector also counts SXids and the lines without an Xid
    assert "detector time / regex time:" in stdout

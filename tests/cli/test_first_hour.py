"""The first hour with the real command: `remediator --version`; the demo prints the token its `describe` hints
need (they answered 401), says which port is taken and names --port instead of "Address already in use", and
removes its temporary folder on SIGTERM as on Ctrl-C; `get remediations` fits 120 columns (short GPU UUIDs,
`-o wide` whole); the guard's lock file is ignored by git."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from remediator import __version__
from remediator.cli.output import render

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "remediator.cli"]


def test_version() -> None:
    done = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"remediator {__version__}"


def test_demo_on_a_taken_port_says_so_in_one_line_and_exits_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*CLI, "demo", "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "--port" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "Address already in use" not in done.stderr


@pytest.mark.timeout(120)
def test_demo_hints_carry_their_token_and_sigterm_cleans_up(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}  # no config file of the person running the tests
    env.pop("REMEDIATOR_TOKEN", None)
    demo = subprocess.Popen([*CLI, "demo", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, cwd=tmp_path)
    try:
        assert demo.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            lines.append(line)
            if line.startswith("Serving until Ctrl-C") or not line:
                break
        text = "".join(lines)
        folder = Path(re.search(r"database (\S+)/demo\.db", text).group(1))  # type: ignore[union-attr]
        token = re.search(r"export REMEDIATOR_TOKEN=(\S+)", text).group(1)  # type: ignore[union-attr]
        hint = re.search(r"remediator (describe \S+ --server \S+)", text).group(1)  # type: ignore[union-attr]
        assert folder.is_dir()
        described = subprocess.run([*CLI, *hint.split()], capture_output=True, text=True, timeout=60,
                                   env={**env, "REMEDIATOR_TOKEN": token})
        assert described.returncode == 0, described.stderr
        assert "401" not in described.stderr and hint.split()[1] in described.stdout, described.stdout
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=30) == 0
        assert not folder.exists(), f"{folder} left behind"
        assert "Traceback" not in demo.stdout.read()
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


def test_get_remediations_fits_120_columns_and_wide_shows_everything() -> None:
    uuid = "GPU-8e6a1c2d-0000-4000-8000-000000000001"
    rows = [{"id": "1145ddd4-07ed-407a-8aa4-c18782e333be", "state": "awaiting_approval",
             "playbook": "reboot-node-approval", "target": f"demo-gpu-node-1/{uuid}",
             "gpu_uuid": uuid, "created_at": "2026-12-05T10:00:00Z", "state_reason": "waiting " * 30}]
    narrow = render("remediations", rows, "", datetime.now(UTC))
    assert max(len(line) for line in narrow.splitlines()) <= 120
    assert "demo-gpu-node-1/GPU-8e6a1c2d " in narrow and uuid not in narrow
    wide = render("remediations", rows, "wide", datetime.now(UTC))
    assert uuid in wide and "1145ddd4-07ed-407a-8aa4-c18782e333be" in wide


def test_the_guards_lock_file_is_ignored_by_git() -> None:
    done = subprocess.run(["git", "check-ignore", "-q", "remediator.db.lock"], cwd=REPO, timeout=30)
    assert done.returncode == 0


def test_the_intake_spool_files_are_ignored_by_git() -> None:
    """`remediator serve` in the checkout, as the README starts it, runs the worker process (the default on a
    SQLite file) and so writes the intake spool beside ./remediator.db."""
    for name in ("remediator.intake.db", "remediator.intake.db-wal", "remediator.intake.db-shm"):
        done = subprocess.run(["git", "check-ignore", "-q", name], cwd=REPO, timeout=30)
        assert done.returncode == 0, name

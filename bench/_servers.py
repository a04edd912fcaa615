"""Start and stop the processes a benchmark measures (controller, baseline app) on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status < 500:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up within {timeout}s")


def start(args: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    full_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        return subprocess.Popen(args, env=full_env, stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT))


def controller_database(workdir: Path, port: int) -> Path:
    """The SQLite file of the controller `controller(port, workdir, ...)` starts."""
    return workdir / f"bench-{port}.db"


def controller(
    port: int, workdir: Path, env: Mapping[str, str], *, intake_synchronous: str | None = None
) -> subprocess.Popen[bytes]:
    """`remediator serve` on a fresh SQLite file; `intake_synchronous` overrides the intake's fsync mode."""
    if intake_synchronous is None:
        command = [sys.executable, "-m", "remediator.cli"]
    else:
        prelude = ("import sys, remediator.store.sqlite_intake as s; s.INTAKE_SYNCHRONOUS = sys.argv.pop(1); "
                   "from remediator.cli.main import main; main()")
        command = [sys.executable, "-c", prelude, intake_synchronous]
    return start(
        [*command, "serve", "--host", "127.0.0.1", "--port", str(port)],
        {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{controller_database(workdir, port)}", **env},
        workdir / f"controller-{port}.log",
    )


def bare(port: int, workdir: Path) -> subprocess.Popen[bytes]:
    return start(
        [sys.executable, "-m", "uvicorn", "bench.bare_app:app", "--host", "127.0.0.1", "--port", str(port),
         "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"],
        {}, workdir / f"bare-{port}.log",
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def rss_mb(pid: int) -> float:
    """Resident memory of one process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def tree_rss_mb(pid: int) -> list[float]:
    """Resident memory of a process and of each of its children (a worker process), in MB."""
    children = [int(c) for task in Path(f"/proc/{pid}/task").glob("*")
                for c in (task / "children").read_text().split()]
    return [rss_mb(pid), *(rss_mb(c) for c in children)]

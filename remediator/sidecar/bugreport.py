"""`POST /v1/diagnostics`: run NVIDIA's `nvidia-bug-report.sh` and keep its report on the node.

The operations guide's emergency procedure runs the script by hand; this does the same, bounded: it runs
as an argument list with `--output-file <dir>/nvidia-bug-report-<UTC time>.log` (the script appends `.gz`
when gzip is there) and `--safe-mode` unless asked otherwise, for at most DIAGNOSTICS_TIMEOUT seconds, and
is stopped as soon as the report grows past DIAGNOSTICS_MAX_BYTES (the file is then cut to that size and
marked truncated). The answer gives the report's path, size and SHA-256, so the controller can reference
it in the audit log without moving it. One report at a time per node.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from remediator.sidecar.bounded import run_bounded
from remediator.sidecar.problems import Problem
from remediator.sidecar.schemas import DiagnosticsReport, DiagnosticsRequest

__all__ = ["BugReporter", "find_bug_report"]

SCRIPT = "nvidia-bug-report.sh"


def find_bug_report(configured: Path | None) -> Path | None:
    """The configured script when it is an executable file, else `nvidia-bug-report.sh` on PATH."""
    if configured is not None:
        return configured if configured.is_file() and os.access(configured, os.X_OK) else None
    found = shutil.which(SCRIPT)
    return Path(found) if found else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class BugReporter:
    """Runs the script one at a time and describes what it left."""

    def __init__(self, script: Path | None, directory: Path, timeout: float, max_bytes: int) -> None:
        self.script = script
        self.directory = directory
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._lock = asyncio.Lock()

    async def collect(self, request: DiagnosticsRequest) -> DiagnosticsReport:
        script = find_bug_report(self.script)
        if script is None:
            where = f"at {self.script}" if self.script else "on PATH"
            return DiagnosticsReport(available=False, detail=f"not available: {SCRIPT} not found {where}")
        if self._lock.locked():
            raise Problem(409, "a bug report is already being collected on this node")
        async with self._lock:
            return await self._run(script, request)

    async def _run(self, script: Path, request: DiagnosticsRequest) -> DiagnosticsReport:
        started_at = datetime.now(UTC)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise Problem(500, f"cannot create the diagnostics directory {self.directory}: {exc}") from exc
        base = self.directory / f"nvidia-bug-report-{started_at:%Y%m%dT%H%M%S}Z.log"
        candidates = (base.with_name(base.name + ".gz"), base)
        argv = [str(script), "--output-file", str(base)]
        if request.safe_mode:
            argv.append("--safe-mode")
        timeout = request.timeout_seconds or self.timeout

        def too_big() -> str | None:
            for path in candidates:
                try:
                    if path.stat().st_size > self.max_bytes:
                        return f"the report grew past {self.max_bytes} bytes"
                except OSError:
                    continue
            return None

        begun = time.monotonic()
        try:
            done = await run_bounded(argv, timeout=timeout, max_output=64 * 1024, cwd=self.directory,
                                     stop=too_big, poll_seconds=0.5)
        except OSError as exc:
            return DiagnosticsReport(available=True, detail=f"cannot start {script}: {exc}", argv=argv,
                                     started_at=started_at)
        report = DiagnosticsReport(
            available=True, argv=argv, exit_code=done.exit_code, timed_out=done.timed_out,
            started_at=started_at, duration_seconds=round(time.monotonic() - begun, 3),
            output_tail=(done.stdout + done.stderr).decode(errors="replace").strip()[-2000:],
        )
        problems = []
        if done.timed_out:
            problems.append(f"{SCRIPT} did not finish within {timeout:g} s and was killed")
        elif done.stopped:
            problems.append(f"{SCRIPT} was stopped: {done.stopped}")
        elif done.exit_code != 0:
            problems.append(f"{SCRIPT} exited {done.exit_code}")
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            problems.append("it left no report")
        else:
            size = path.stat().st_size
            if size > self.max_bytes:
                os.truncate(path, self.max_bytes)
                report.truncated = True
            digest = await asyncio.to_thread(_sha256, path)
            report.path, report.size_bytes, report.sha256 = str(path), path.stat().st_size, digest
        report.detail = "; ".join(problems)
        return report

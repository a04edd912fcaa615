"""Run a node tool (dcgmi, nvidia-bug-report.sh) as an argument list, bounded in time and output.

Tools that talk to a sick GPU can hang, and a hung child must not hold the sidecar or leave orphans: the
child starts in its own session (a new process group), so at the deadline the whole group gets SIGTERM
(dcgmi stops its running diagnostic on it) and, after a grace period, SIGKILL. Output is read as it comes
and only the first `max_output` bytes are kept, so a chatty tool cannot fill memory. Never a shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Finished", "run_bounded"]

KILL_GRACE_SECONDS = 5.0
_CHUNK = 65536


@dataclass(frozen=True)
class Finished:
    """How a bounded run ended. `exit_code` is None when the child was killed (timed out or stopped)."""

    argv: list[str]
    exit_code: int | None
    timed_out: bool
    # Set when `stop` asked for the child to be killed, with its reason.
    stopped: str | None
    stdout: bytes
    stdout_truncated: bool
    stderr: bytes
    seconds: float


async def _drain(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, bool]:
    """Read to EOF, keeping the first `limit` bytes."""
    if stream is None:
        return b"", False
    kept = bytearray()
    truncated = False
    while chunk := await stream.read(_CHUNK):
        room = limit - len(kept)
        if len(chunk) > room:
            truncated = True
        kept += chunk[: max(room, 0)]
    return bytes(kept), truncated


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _end_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the child's process group, SIGKILL it if the child is still there after `grace` seconds."""
    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), grace)
    # Whatever is left of the group (children that ignored SIGTERM) goes too.
    _signal_group(proc.pid, signal.SIGKILL)
    await proc.wait()


async def run_bounded(
    argv: Sequence[str],
    *,
    timeout: float,
    max_output: int = 4 * 1024 * 1024,
    cwd: Path | None = None,
    stop: Callable[[], str | None] | None = None,
    poll_seconds: float = 0.2,
    grace: float = KILL_GRACE_SECONDS,
) -> Finished:
    """Run `argv` (no shell) for at most `timeout` seconds; `stop()` is polled and a reason ends the run."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        start_new_session=True,
    )
    readers = (
        asyncio.ensure_future(_drain(proc.stdout, max_output)),
        asyncio.ensure_future(_drain(proc.stderr, 64 * 1024)),
    )
    timed_out = False
    stopped: str | None = None
    deadline = started + timeout
    try:
        while proc.returncode is None:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), min(left, poll_seconds) if stop else left)
            if proc.returncode is None and stop is not None:
                stopped = stop()
                if stopped:
                    break
        if proc.returncode is None:
            await _end_group(proc, grace)
        else:
            # The child is done; members of its group it left behind must not outlive the request.
            _signal_group(proc.pid, signal.SIGKILL)
    finally:
        if proc.returncode is None:  # cancelled: never leave the child running
            _signal_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    # Pipes close once every holder is gone; a grandchild that left the group could keep them open.
    done, pending = await asyncio.wait(readers, timeout=grace)
    for task in pending:
        task.cancel()
    stdout, truncated = readers[0].result() if readers[0] in done else (b"", False)
    stderr, _ = readers[1].result() if readers[1] in done else (b"", False)
    killed = timed_out or stopped is not None
    return Finished(
        argv=list(argv),
        exit_code=None if killed else proc.returncode,
        timed_out=timed_out,
        stopped=stopped,
        stdout=stdout,
        stdout_truncated=truncated,
        stderr=stderr,
        seconds=time.monotonic() - started,
    )

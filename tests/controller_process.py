"""`remediator serve` as a real subprocess on 127.0.0.1, for multi-replica and end-to-end tests."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ControllerProcess:
    """One controller replica. `kill()` is kill -9: no lease is released, nothing is flushed."""

    def __init__(
        self,
        workdir: Path,
        env: Mapping[str, str],
        name: str = "controller",
        *,
        python_args: Sequence[str] = ("-m", "remediator.cli"),
    ) -> None:
        self.python_args = list(python_args)  # e.g. ("-c", prelude) that patches something, then runs the CLI
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{name}.log"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "REMEDIATOR_REPLICA_ID": name,
            "REMEDIATOR_LOG_LEVEL": "INFO",
            "REMEDIATOR_AUDIT_KEY": "controller-process-audit-key",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self, timeout: float = 60.0) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *self.python_args, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT),
            )
        async with httpx.AsyncClient() as client, asyncio.timeout(timeout):
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"controller exited early:\n{self.log.read_text()[-4000:]}")
                try:
                    if (await client.get(f"{self.url}/readyz", timeout=1)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    async def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout=15)
        except TimeoutError:
            self.kill()

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

"""A fresh PostgreSQL database per test on the machine's server (127.0.0.1:5432, trust auth).

The server is part of the test environment (CI starts it), so a missing server is a failure, not a skip.
`PrivatePostgres` is a server of one test's own, for tests that kill and restart it.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from tests.controller_process import free_port

PG_HOST = os.environ.get("PGHOST", "127.0.0.1")
PG_PORT = int(os.environ.get("PGPORT", "5432"))
PG_USER = os.environ.get("PGUSER", "postgres")
PG_ADMIN_DB = os.environ.get("PGDATABASE", "test")


async def _admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=PG_ADMIN_DB, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL at {PG_HOST}:{PG_PORT} (database {PG_ADMIN_DB}) is needed: {exc}")


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """`postgresql+asyncpg://...` of a database created for this test and dropped after it."""
    name = f"remediator_{uuid.uuid4().hex[:12]}"
    admin = await _admin()
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    admin = await _admin()
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


PG_BIN = Path(os.environ.get("REMEDIATOR_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _unprivileged() -> tuple[list[str], int, int] | None:
    """As root: a command prefix that runs as an unprivileged user (initdb refuses root), with its uid and
    gid: the `postgres` system user of Debian's package, else `nobody`. None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            continue
        prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--"]
        return prefix, user.pw_uid, user.pw_gid
    raise RuntimeError("running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")


class PrivatePostgres:
    """A PostgreSQL server of the test's own, which it may kill -9 and start again on the same data directory
    and port (the machine's server on 5432 is shared by every test). Trust auth, user postgres, listening on
    127.0.0.1 only, its socket in its own directory; as root it runs as an unprivileged user."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="remediator-pg-"))
        self.data = self.dir / "data"
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"
        run_as = _unprivileged()
        self._prefix: list[str] = run_as[0] if run_as else []
        if run_as is not None:
            os.chown(self.dir, run_as[1], run_as[2])

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self._prefix, *args], capture_output=True, text=True, timeout=120, check=False)

    async def start(self, timeout: float = 60.0) -> None:
        """initdb (the first time), then pg_ctl start; tried again while the killed server's backends are
        still leaving (its shared memory is in use until they have)."""
        if not self.data.exists():
            done = await asyncio.to_thread(
                self._run, str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                "-E", "UTF8", "--no-sync",
            )
            if done.returncode:
                raise RuntimeError(f"initdb failed: {done.stdout}{done.stderr}")
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200 "
                   "-c fsync=off")
        async with asyncio.timeout(timeout):
            while True:
                done = await asyncio.to_thread(
                    self._run, str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
                    "-l", str(self.dir / "server.log"), "-w", "-t", "30", "start",
                )
                if done.returncode == 0:
                    return
                await asyncio.sleep(0.5)

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().splitlines()[0])

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would (its backends notice and leave on their own)."""
        os.kill(self.postmaster_pid(), signal.SIGKILL)

    async def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            await asyncio.to_thread(self._run, str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                                    "-w", "stop")

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    async def __aenter__(self) -> PrivatePostgres:
        try:
            await self.start()
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        return self

    async def __aexit__(self, *_exc: object) -> None:
        try:
            await self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

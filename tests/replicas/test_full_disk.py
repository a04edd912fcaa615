"""`serve` on a full disk stops with one line naming the database's path and the free space, never a traceback.

A full volume cannot be made without privileges here, so the serve process is given a full disk through a
sitecustomize: the file system reports (almost) no free space, or a start-up write fails with ENOSPC as on a
full disk. A worker process that meets the full disk after those checks says so in one line too.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.cli.test_cli import run
from tests.controller_process import ROOT, free_port

pytestmark = pytest.mark.timeout(120)


def _serve_with(tmp_path: Path, hook_source: str, **env: str) -> tuple[int, str]:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(hook_source)
    result = run("serve", "--port", str(free_port()), env={
        "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
        "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}", **env,
    })
    return result.returncode, result.stderr


# The file system of the database reports 40 KiB free (what a restart on a full volume met).
_LITTLE_FREE = """
import os
_real = os.statvfs
DIRECTORY = {directory!r}

def statvfs(path):
    st = _real(path)
    if os.fspath(path) == DIRECTORY:
        return os.statvfs_result((st.f_bsize, 4096, st.f_blocks, 10, 10, st.f_files, st.f_ffree, st.f_favail,
                                  st.f_flag, st.f_namemax))
    return st

os.statvfs = statvfs
"""

# Writing the lock file's holder line fails with ENOSPC, as on a disk that filled since the check.
_NO_SPACE_ON_WRITE = """
import errno, os
_real = os.write

def write(fd, data):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        target = ""
    if target.endswith(".db.lock"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return _real(fd, data)

os.write = write
"""


@pytest.mark.parametrize("worker_process", ["false", "true"])
async def test_a_full_disk_at_start_is_one_line_with_the_path_and_the_free_space(
    tmp_path: Path, worker_process: str
) -> None:
    code, stderr = await asyncio.to_thread(
        _serve_with, tmp_path, _LITTLE_FREE.format(directory=str(tmp_path)),
        REMEDIATOR_WORKER_PROCESS=worker_process,
    )
    assert code == 4, stderr
    assert "Traceback" not in stderr
    assert stderr.count("\n") == 1 and stderr.startswith("error: "), stderr
    assert f"the disk holding {tmp_path / 'c.db'} is full: 40.0 KiB free" in stderr
    assert not (tmp_path / "c.db").exists()  # stopped before writing anything


async def test_enospc_from_a_start_up_write_is_one_line_with_the_path_and_the_free_space(tmp_path: Path) -> None:
    code, stderr = await asyncio.to_thread(_serve_with, tmp_path, _NO_SPACE_ON_WRITE)
    assert code == 4, stderr
    assert "Traceback" not in stderr
    assert stderr.count("\n") == 1 and stderr.startswith("error: "), stderr
    assert f"the disk holding {tmp_path / 'c.db'} is full: " in stderr
    assert " free, at least 1.0 MiB is needed to start" in stderr


# In the worker process only: every SQLite file fails as on a disk that filled after the start-up checks.
_WORKER_DISK_IO_ERROR = """
import os, sqlite3
if os.environ.get("REMEDIATOR_WORKER_LINK_FD"):
    def connect(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")
    sqlite3.connect = connect
"""


async def test_a_worker_process_meeting_a_full_disk_at_start_says_so_in_one_line(tmp_path: Path) -> None:
    code, stderr = await asyncio.to_thread(
        _serve_with, tmp_path, _WORKER_DISK_IO_ERROR, REMEDIATOR_WORKER_PROCESS="true")
    assert code == 8, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert " ERROR __main__: the worker process could not start: disk I/O error\n" in stderr
    assert stderr.endswith("error: the worker process exited with code 1 before it started: stopped\n")

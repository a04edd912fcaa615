"""`remediator serve` start-up failures: one line on stderr, no traceback, an exit code per kind."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_cli import run
from tests.controller_process import free_port


def _serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run("serve", "--port", str(free_port()), *args, env=env)


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr[-3000:]
    return result.stderr


def _migrated(db: Path) -> None:
    assert run("db", "upgrade", env={"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{db}"}).returncode == 0


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_damaged_sqlite_file(tmp_path: Path, damage: str) -> None:
    db = tmp_path / "remediator.db"
    if damage == "garbage":
        db.write_bytes(os.urandom(16384))
    else:
        _migrated(db)
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 2])
    line = _one_line(_serve({"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{db}"}), 4)
    assert str(db) in line and "backup" in line


def test_bad_settings(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("max_quarantined_nodes: ten\nflap_window: soon\n")
    line = _one_line(_serve({}, "--config", str(config)), 2)
    assert "MAX_QUARANTINED_NODES" in line and "FLAP_WINDOW" in line


def test_schema_from_an_unknown_version(tmp_path: Path) -> None:
    db = tmp_path / "remediator.db"
    _migrated(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    line = _one_line(_serve({"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{db}"}), 5)
    assert "9999" in line


def test_unreachable_postgres() -> None:
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/none"
    line = _one_line(_serve({"REMEDIATOR_DATABASE_URL": url}), 4)
    assert "cannot reach PostgreSQL at 127.0.0.1" in line


def test_public_bind_needs_an_audit_key(tmp_path: Path) -> None:
    env = {"REMEDIATOR_WEBHOOK_TOKEN": "t", "REMEDIATOR_AUDIT_KEY": "",
           "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"}
    line = _one_line(_serve(env, "--host", "0.0.0.0"), 2)
    assert "REMEDIATOR_AUDIT_KEY" in line
    key_file = tmp_path / "missing-key"
    line = _one_line(_serve({**env, "REMEDIATOR_AUDIT_KEY_FILE": str(key_file)}, "--host", "0.0.0.0"), 2)
    assert str(key_file) in line


def test_an_intake_spool_that_cannot_be_opened_stops_the_start(tmp_path: Path) -> None:
    """With the worker process, webhooks are spooled beside the database: a spool that cannot be written (here
    a directory where its file belongs) is one line and exit 4 at start, not a 503 for every webhook."""
    db = tmp_path / "remediator.db"
    (tmp_path / "remediator.intake.db").mkdir()
    env = {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{db}", "REMEDIATOR_WORKER_PROCESS": "true"}
    line = _one_line(_serve(env), 4)
    assert f"cannot open the intake spool {tmp_path / 'remediator.intake.db'}" in line

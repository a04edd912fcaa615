"""The command line: check, simulate, audit verify/export, db upgrade, and serve's refusal without a token."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from remediator.settings import BUNDLED_DIR
from tests.helpers import am_alert, am_payload, xid_labels


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remediator.cli", *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})}, cwd=cwd,
    )


def test_check_passes_on_shipped_definitions() -> None:
    result = run("check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok")


def test_check_fails_with_file_and_line_on_a_broken_copy(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    playbooks = tmp_path / "playbooks"
    shutil.copytree(BUNDLED_DIR / "rules", rules)
    shutil.copytree(BUNDLED_DIR / "playbooks", playbooks)
    book = playbooks / "quarantine-node.yaml"
    lines = book.read_text().splitlines()
    cordon = next(i for i, line in enumerate(lines) if line.strip() == "action: cordon")
    lines[cordon] = lines[cordon].replace("cordon", "cordn")
    book.write_text("\n".join(lines) + "\n")
    result = run("check", str(rules), str(playbooks))
    assert result.returncode == 1
    assert f"{book}:{cordon + 1}:" in result.stdout
    assert "cordn" in result.stdout


def test_simulate_prints_the_plan_and_touches_nothing(tmp_path: Path) -> None:
    alert = tmp_path / "alert.json"
    alert.write_text(json.dumps(am_payload(am_alert(xid_labels("gpu-7", 79)))))
    result = run("simulate", str(alert), "--json", cwd=tmp_path,
                 env={"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'never.db'}"})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    entry = report["alerts"][0]
    assert entry["rule"] == "xid-reboot-node" and entry["playbook"] == "reboot-node"
    assert entry["xid"]["resolution"] == "RESTART_BM"
    taint = next(s for s in entry["steps"] if s["name"] == "taint")
    assert taint["params"]["value"] == "xid-79"
    assert entry["guardrails"]["allow"] is True
    assert not (tmp_path / "never.db").exists()
    text = run("simulate", str(alert), cwd=tmp_path)
    assert "xid-reboot-node -> playbook reboot-node" in text.stdout


def test_simulate_rejects_a_malformed_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": "4"}')
    result = run("simulate", str(bad))
    assert result.returncode == 2 and "alerts" in result.stderr


def test_serve_refuses_public_bind_without_token(tmp_path: Path) -> None:
    result = run("serve", "--host", "0.0.0.0", env={"REMEDIATOR_WEBHOOK_TOKEN": "",
                                                    "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/x.db"})
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0 without REMEDIATOR_WEBHOOK_TOKEN" in result.stderr


def test_db_upgrade_then_audit_verify_detects_an_edit(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    env = {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{db}"}
    assert run("db", "upgrade", env=env).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO controller_state(key, value, updated_at) VALUES ('x', '{}', '2026-01-01')")
    # Write three chained events through the repository, then tamper with the second.
    code = (
        "import asyncio\n"
        "from remediator.store.db import make_engine, make_sessionmaker\n"
        "from remediator.store.repository import Repository\n"
        "async def main():\n"
        f"    e = make_engine('sqlite+aiosqlite:///{db}')\n"
        "    r = Repository(make_sessionmaker(e))\n"
        "    for i in range(3):\n"
        "        async with r.transaction() as s:\n"
        "            await r.audit(s, 'test', data={'i': i})\n"
        "    await e.dispose()\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    ok = run("audit", "verify", env=env)
    assert ok.returncode == 0 and "3 audit events" in ok.stdout
    exported = run("audit", "export", env=env).stdout.splitlines()
    assert [json.loads(line)["data"]["i"] for line in exported] == [0, 1, 2]
    with sqlite3.connect(db) as conn:
        second = conn.execute("SELECT id FROM audit_events ORDER BY id LIMIT 1 OFFSET 1").fetchone()[0]
        conn.execute("UPDATE audit_events SET data = ? WHERE id = ?", ('{"i": 42}', second))
    bad = run("audit", "verify", env=env)
    assert bad.returncode == 1 and f"audit event {second}" in bad.stdout


def test_simulate_prints_what_the_alert_carries_escaped(tmp_path: Path) -> None:
    evil = "\x1b]0;pwned\x07\x1b[2J\r\x9b31m\u202eevil\nrule: none"
    alert = tmp_path / "alert.json"
    alert.write_text(json.dumps(am_payload(am_alert(xid_labels("gpu-7", 79, uuid="GPU-" + evil)))))
    env = {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'never.db'}"}
    text = run("simulate", str(alert), cwd=tmp_path, env=env)
    assert text.returncode == 0, text.stderr
    assert r"gpu=GPU-\x1b]0;pwned\x07\x1b[2J\r\x9b31m\u202eevil\nrule: none kind=" in text.stdout
    assert not any(c in text.stdout for c in "\x1b\x07\r\x9b\u202e"), ascii(text.stdout)
    as_json = run("simulate", str(alert), "--json", cwd=tmp_path, env=env)
    assert json.loads(as_json.stdout)["alerts"][0]["alert"]["gpu_uuid"] == "GPU-" + evil

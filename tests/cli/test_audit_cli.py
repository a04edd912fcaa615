"""`remediator audit verify | head` and `db prune` on a keyed chain, as an operator runs them."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from pathlib import Path

from remediator.engine.bootstrap import build_runtime
from remediator.settings import Settings
from remediator.store.audit import canonical
from tests.cli.test_cli import run

KEY = "0123456789abcdef0123456789abcdef"


def _write_events(db: Path, n: int) -> None:
    async def main() -> None:
        settings = Settings(database_url=f"sqlite+aiosqlite:///{db}", audit_key=KEY)
        rt, engine = await build_runtime(settings, connect_kube=False)
        for i in range(n):
            async with rt.repo.transaction() as session:
                await rt.repo.audit(session, "test.event", data={"i": i})
        await engine.dispose()

    asyncio.run(main())


def _rehash_from(conn: sqlite3.Connection, first: int, data: dict[str, int]) -> None:
    """What an attacker with database access but no key does: edit, then recompute the SHA-256 chain."""
    rows = conn.execute(
        "SELECT id, ts, remediation_id, kind, actor, data, prev_hash FROM audit_events WHERE id >= ? ORDER BY id",
        (first,),
    ).fetchall()
    prev = rows[0][6]
    for row_id, ts, rem, kind, actor, raw, _ in rows:
        body_data = data if row_id == first else json.loads(raw)
        body = {"ts": ts.replace(" ", "T").split("+")[0], "remediation_id": rem, "kind": kind, "actor": actor,
                "data": body_data, "prev_hash": prev}
        digest = hashlib.sha256(canonical(body).encode()).hexdigest()
        conn.execute("UPDATE audit_events SET data = ?, prev_hash = ?, hash = ? WHERE id = ?",
                     (json.dumps(body_data), prev, digest, row_id))
        prev = digest


def test_an_edit_rehashed_without_the_key_fails_verify(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    env = {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{db}", "REMEDIATOR_AUDIT_KEY": KEY}
    _write_events(db, 4)
    assert run("audit", "verify", env=env).returncode == 0
    with sqlite3.connect(db) as conn:
        second = conn.execute("SELECT id FROM audit_events ORDER BY id LIMIT 1 OFFSET 1").fetchone()[0]
        _rehash_from(conn, second, {"i": 42})
    unkeyed = run("audit", "verify", env={**env, "REMEDIATOR_AUDIT_KEY": ""})
    assert unkeyed.returncode == 1  # without the key the keyed events cannot be checked at all
    bad = run("audit", "verify", env=env)
    assert bad.returncode == 1 and f"audit event {second}:" in bad.stdout, bad.stdout + bad.stderr


def test_deleting_the_newest_events_fails_verify_against_the_anchor(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    env = {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{db}", "REMEDIATOR_AUDIT_KEY": KEY}
    _write_events(db, 6)
    head = run("audit", "head", env=env)
    assert head.returncode == 0, head.stderr
    anchor = head.stdout.strip()
    seq, digest = anchor.split(":")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT hash FROM audit_events WHERE id = ?", (int(seq),)).fetchone()[0] == digest
    assert run("audit", "verify", "--anchor", anchor, env=env).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM audit_events WHERE id > ?", (int(seq) - 3,))
    assert run("audit", "verify", env=env).returncode == 0  # a shorter chain is intact on its own
    bad = run("audit", "verify", "--anchor", anchor, env=env)
    assert bad.returncode == 1 and "truncated" in bad.stdout
    assert run("audit", "verify", "--anchor", "HEAD", env=env).returncode == 2  # not SEQ:HASH


def test_db_prune_keeps_the_chain_verifiable(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    env = {"REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{db}", "REMEDIATOR_AUDIT_KEY": KEY}
    _write_events(db, 5)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE audit_events SET ts = '2020-01-01 00:00:00.000000' WHERE id <= 3")
        _rehash_all = conn.execute("SELECT count(*) FROM audit_events").fetchone()[0]
    assert _rehash_all == 5
    # The timestamps are part of the hash: backdating them is itself an edit that verify names.
    assert run("audit", "verify", env=env).returncode == 1
    assert run("db", "prune", env=env).returncode == 2  # no retention given
    pruned = run("db", "prune", "--audit-older-than", "30d", env=env)
    assert pruned.returncode == 0 and "3 audit event(s)" in pruned.stdout, pruned.stdout + pruned.stderr
    ok = run("audit", "verify", env=env)
    assert ok.returncode == 0 and "checkpoint at event 3" in ok.stdout, ok.stdout

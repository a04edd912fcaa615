"""Schema migrations that move data, on SQLite and PostgreSQL: rows written under the old schema read the
same under the new one, and a downgrade gives them back.

0007: approval decisions stored once, on the approval request (no longer also on the remediation).
0008: a remediation's phase derived from its state (the `phase` column goes; steps keep theirs).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import AsyncEngine

from remediator.api.schemas import summary_out
from remediator.engine.approval_decisions import decision_of
from remediator.store.db import MIGRATIONS_DIR, make_engine, make_sessionmaker, upgrade
from remediator.store.repository import Repository

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
PLAN = {"playbook": {"on_expiry": "abort", "steps": [{"name": "cordon"}, {"name": "drain"}]}}
CONTINUES = {"playbook": {"on_expiry": "continue", "steps": [{"name": "cordon"}, {"name": "drain"}]}}


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(db_url)
    yield engine
    await engine.dispose()


async def downgrade(url: str, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    await asyncio.to_thread(command.downgrade, config, revision)


def remediation(rem_id: str, **columns: Any) -> dict[str, Any]:
    """A `remediations` row as revision 0006 has it."""
    return {
        "id": rem_id, "created_at": T0, "updated_at": T0 + timedelta(minutes=5), "finished_at": None,
        "state": "awaiting_approval", "state_reason": None, "rule": "xid", "playbook": "drain-node",
        "definitions_version": "v1", "target_kind": "node", "target_key": f"node/{rem_id}", "node": rem_id,
        "gpu_uuid": None, "gpu_index": None, "namespace": None, "pod": None, "alert_id": None,
        "alert_fingerprint": "f", "alertname": "GPUXidError", "alert_labels": {}, "alert_annotations": {},
        "alert_resolved": False, "params": {}, "plan": PLAN, "context": {}, "phase": "forward",
        "current_step": 0, "active_key": None, "quarantined": False, "linked_alerts": 0, "lease_owner": None,
        "lease_expires": None, "next_run_at": None, "approval_token_hash": None, "approval_expires_at": None,
        "approval_step": None, "decided_by": None, "decided_at": None, "decision": None, "crashes": 0,
        "not_before": None, "error": None, **columns,
    }


def request(rem_id: str, token: str, **columns: Any) -> dict[str, Any]:
    """An `approvals` row for step 1 (`drain`)."""
    return {
        "remediation_id": rem_id, "step_index": 1, "step_name": "drain", "token_hash": token * 64,
        "created_at": T0, "expires_at": T0 + timedelta(hours=1), "requested_to": ["channel:slack"],
        "decision": None, "decided_by": None, "decided_at": None, "decision_source": None, **columns,
    }


async def table(engine: AsyncEngine, name: str) -> sa.Table:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda sync: sa.Table(name, sa.MetaData(), autoload_with=sync))


async def rows(engine: AsyncEngine, name: str, order: str) -> list[dict[str, Any]]:
    found = await table(engine, name)
    async with engine.connect() as conn:
        result = await conn.execute(sa.select(found).order_by(found.c[order]))
        return [dict(r._mapping) for r in result]


async def insert(engine: AsyncEngine, name: str, values: list[dict[str, Any]]) -> None:
    """`values` into table `name` as the current revision has it (keys it lacks are left out)."""
    found = await table(engine, name)
    async with engine.begin() as conn:
        await conn.execute(sa.insert(found), [{k: v for k, v in row.items() if k in found.c} for row in values])


def utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=UTC) if value.tzinfo is None else value


async def test_0007_moves_decisions_onto_the_requests_and_back(db_url: str, engine: AsyncEngine) -> None:
    await upgrade(db_url, "0006")
    decided = T0 + timedelta(minutes=20)
    remediations = [
        # Waited before the approvals table existed: only the remediation knows the request and its decision.
        remediation("old-approved", state="succeeded", approval_step=1, approval_token_hash="1" * 64,
                    approval_expires_at=T0 + timedelta(hours=1), decision="approved", decided_by="alice",
                    decided_at=decided),
        remediation("old-waiting", approval_step=1, approval_token_hash="2" * 64,
                    approval_expires_at=T0 + timedelta(hours=1)),
        # The newest request left undecided while the remediation recorded the decision.
        remediation("half-rejected", state="rejected", approval_step=1, approval_token_hash="3" * 64,
                    approval_expires_at=T0 + timedelta(hours=1), decision="rejected", decided_by="bob",
                    decided_at=decided),
        # An expiry the playbook treats as consent: the remediation says approved, the request expired.
        remediation("expired-continue", state="running", plan=CONTINUES, approval_step=1,
                    approval_token_hash="4" * 64, approval_expires_at=T0 + timedelta(hours=1), decision="approved",
                    decided_by="controller", decided_at=decided),
        remediation("never-asked", state="succeeded"),
    ]
    requests = [
        request("half-rejected", "3"),
        request("expired-continue", "4", decision="expired", decided_by="controller", decided_at=decided,
                decision_source="expiry"),
    ]
    remediations_0006, approvals_0006 = await table(engine, "remediations"), await table(engine, "approvals")
    async with engine.begin() as conn:
        await conn.execute(sa.insert(remediations_0006), remediations)
        await conn.execute(sa.insert(approvals_0006), requests)

    await upgrade(db_url, "0007")

    columns = {c.name for c in (await table(engine, "remediations")).columns}
    assert not columns & {"approval_token_hash", "approval_expires_at", "approval_step", "decided_by",
                          "decided_at", "decision"}
    by_rem = {r["remediation_id"]: r for r in await rows(engine, "approvals", "id")}
    assert set(by_rem) == {"old-approved", "old-waiting", "half-rejected", "expired-continue"}
    old = by_rem["old-approved"]
    assert (old["step_index"], old["step_name"], old["token_hash"]) == (1, "drain", "1" * 64)
    assert (old["decision"], old["decided_by"], utc(old["decided_at"])) == ("approved", "alice", decided)
    assert utc(old["expires_at"]) == T0 + timedelta(hours=1)
    assert by_rem["old-waiting"]["decision"] is None and by_rem["old-waiting"]["token_hash"] == "2" * 64
    assert (by_rem["half-rejected"]["decision"], by_rem["half-rejected"]["decided_by"]) == ("rejected", "bob")
    assert by_rem["half-rejected"]["requested_to"] == ["channel:slack"]
    assert (by_rem["expired-continue"]["decision"], by_rem["expired-continue"]["decision_source"]) == (
        "expired", "expiry")

    # What the API shows as the remediation's decision is what it showed before.
    repo = Repository(make_sessionmaker(engine))
    for before in remediations:
        rem = await repo.get(before["id"])
        assert rem is not None
        current = await repo.current_approval(rem.id)
        assert decision_of(rem, current) == before["decision"]
        assert (current.decided_by if current else None) == before["decided_by"]
        assert (current.step_index if current else None) == before["approval_step"]

    await downgrade(db_url, "0006")

    kept = ("approval_step", "approval_token_hash", "decision", "decided_by")
    after = {r["id"]: r for r in await rows(engine, "remediations", "id")}
    for before in remediations:
        assert {k: after[before["id"]][k] for k in kept} == {k: before[k] for k in kept}, before["id"]
        assert utc(after[before["id"]]["decided_at"]) == before["decided_at"]
        assert utc(after[before["id"]]["approval_expires_at"]) == before["approval_expires_at"]
    # The link's hash is unique on the remediation again, as 0001 made it.
    async with engine.begin() as conn:
        await conn.execute(sa.text("UPDATE remediations SET approval_token_hash = NULL WHERE id = 'never-asked'"))
    with pytest.raises(sa.exc.IntegrityError):
        async with engine.begin() as conn:
            await conn.execute(
                sa.text("UPDATE remediations SET approval_token_hash = :h WHERE id = 'never-asked'"), {"h": "1" * 64}
            )


def step(rem_id: str, phase: str, status: str) -> dict[str, Any]:
    return {
        "remediation_id": rem_id, "phase": phase, "idx": 0, "name": "untaint", "action": "untaint",
        "status": status, "attempts": 1, "params": {}, "output": {}, "progress": {}, "error": None,
        "started_at": T0, "finished_at": T0,
    }


def audit_event(rem_id: str, kind: str, n: int) -> dict[str, Any]:
    return {"ts": T0, "remediation_id": rem_id, "kind": kind, "actor": "controller", "data": {},
            "prev_hash": f"{n - 1:064d}", "hash": f"{n:064d}"}


async def test_0008_derives_the_phase_from_the_state_and_restores_the_column(
    db_url: str, engine: AsyncEngine
) -> None:
    await upgrade(db_url, "0007")
    phases = {
        "forward-done": ("succeeded", "forward"),
        "undoing": ("reverting", "revert"),
        "undone": ("reverted", "revert"),
        "undo-failed": ("failed", "revert"),  # its failed revert step says so
        "undo-cancelled": ("cancelled", "revert"),  # its state.reverting audit event says so
        "cancelled": ("cancelled", "forward"),
    }
    await insert(engine, "remediations",
                 [remediation(rem_id, state=state, phase=phase) for rem_id, (state, phase) in phases.items()])
    await insert(engine, "steps",
                 [step("undo-failed", "revert", "failed"), step("forward-done", "forward", "succeeded")])
    await insert(engine, "audit_events",
                 [audit_event("undo-cancelled", "state.reverting", 1), audit_event("cancelled", "state.cancelled", 2)])

    await upgrade(db_url, "0008")

    assert "phase" not in {c.name for c in (await table(engine, "remediations")).columns}
    assert "phase" in {c.name for c in (await table(engine, "steps")).columns}
    repo = Repository(make_sessionmaker(engine))
    for rem_id, (state, _) in phases.items():
        rem = await repo.get(rem_id)
        assert rem is not None and rem.state == state
        assert summary_out(rem).phase == ("revert" if state in ("reverting", "reverted") else "forward")

    await downgrade(db_url, "0007")

    after = {r["id"]: r["phase"] for r in await rows(engine, "remediations", "id")}
    assert after == {rem_id: phase for rem_id, (_, phase) in phases.items()}

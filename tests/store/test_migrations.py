"""Schema migrations that move data, on SQLite and PostgreSQL: rows written under the old schema read the
same under the new one, and a downgrade gives them back.

0007: approval decisions stored once, on the approval request (no longer also on the remediation).
0008: a remediation's phase derived from its state (the `phase` column goes; steps keep theirs).
0011: a plan-only run stored `succeeded` becomes `planned`, and back.
0012: `remediations.return_request` added (null for the rows already there), and dropped keeping the rows.
Each is checked at its own revision through the tables as that revision has them (reflected, never the ORM
models, which are the head's: `Remediation` reads `return_request`, a column only 0012 adds), then through
today's repository once every later migration ran, then downgraded. And every migration from 0009 on: the
chain is one line to one head, and each goes up and down to the same schema.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine

from remediator.api.schemas import summary_out
from remediator.domain.states import phase_of
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


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


async def downgrade(url: str, revision: str) -> None:
    await asyncio.to_thread(command.downgrade, alembic_config(url), revision)


def row_as_object(row: dict[str, Any] | None) -> Any:
    """A reflected row read the way the engine's functions read a model (attributes), at any revision."""
    return None if row is None else SimpleNamespace(**row)


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

    # What the API shows as the remediation's decision is what it showed before: at 0007, from its rows (the
    # newest request of each remediation, as the repository picks it) ...
    rems_0007 = {r["id"]: r for r in await rows(engine, "remediations", "id")}
    newest = {r["remediation_id"]: r for r in await rows(engine, "approvals", "id")}  # by id: the last wins
    for before in remediations:
        current = newest.get(before["id"])
        assert decision_of(row_as_object(rems_0007[before["id"]]), row_as_object(current)) == before["decision"]
        assert (current["decided_by"] if current else None) == before["decided_by"]
        assert (current["step_index"] if current else None) == before["approval_step"]

    # ... and through today's repository once every later migration ran.
    await upgrade(db_url)
    repo = Repository(make_sessionmaker(engine))
    for before in remediations:
        rem = await repo.get(before["id"])
        assert rem is not None
        approval = await repo.current_approval(rem.id)
        assert decision_of(rem, approval) == before["decision"]
        assert (approval.decided_by if approval else None) == before["decided_by"]
        assert (approval.step_index if approval else None) == before["approval_step"]

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
    at_0008 = {r["id"]: r["state"] for r in await rows(engine, "remediations", "id")}
    assert at_0008 == {rem_id: state for rem_id, (state, _) in phases.items()}
    assert {rem_id: phase_of(state) for rem_id, state in at_0008.items()} == {
        rem_id: "revert" if state in ("reverting", "reverted") else "forward" for rem_id, (state, _) in phases.items()}

    await upgrade(db_url)  # today's repository reads the same, once every later migration ran
    repo = Repository(make_sessionmaker(engine))
    for rem_id, (state, _) in phases.items():
        rem = await repo.get(rem_id)
        assert rem is not None and rem.state == state
        assert summary_out(rem).phase == ("revert" if state in ("reverting", "reverted") else "forward")

    await downgrade(db_url, "0007")

    after = {r["id"]: r["phase"] for r in await rows(engine, "remediations", "id")}
    assert after == {rem_id: phase for rem_id, (_, phase) in phases.items()}


async def test_0011_moves_plan_only_successes_to_planned_and_back(db_url: str, engine: AsyncEngine) -> None:
    await upgrade(db_url, "0010")
    before = {
        "plan-only": ("succeeded", "plan-only: nothing was changed"),
        "changed": ("succeeded", "all steps succeeded"),
        "failed-plan": ("failed", "plan-only: nothing was changed"),
        "no-reason": ("succeeded", None),
    }
    await insert(engine, "remediations", [remediation(rem_id, state=state, state_reason=reason)
                                          for rem_id, (state, reason) in before.items()])

    await upgrade(db_url, "0011")

    after = {r["id"]: (r["state"], r["state_reason"]) for r in await rows(engine, "remediations", "id")}
    assert after == {**before, "plan-only": ("planned", "plan-only: nothing was changed")}
    await upgrade(db_url)
    rem = await Repository(make_sessionmaker(engine)).get("plan-only")
    assert rem is not None and summary_out(rem).state == "planned"

    await downgrade(db_url, "0010")

    assert {r["id"]: (r["state"], r["state_reason"]) for r in await rows(engine, "remediations", "id")} == before


async def test_0012_adds_the_return_request_and_drops_it_keeping_the_rows(db_url: str, engine: AsyncEngine) -> None:
    await upgrade(db_url, "0011")
    states = {"held-node": "succeeded", "undoing": "reverting", "done": "reverted"}
    await insert(engine, "remediations", [remediation(rem_id, state=state) for rem_id, state in states.items()])
    await insert(engine, "steps", [step("undoing", "revert", "running")])

    await upgrade(db_url, "0012")

    found = await rows(engine, "remediations", "id")
    assert {r["id"]: (r["state"], r["return_request"]) for r in found} == {
        rem_id: (state, None) for rem_id, state in states.items()}
    request_ = {"actor": "alice", "reason": "vendor swapped the board", "skip": ["reboot"], "at": T0.isoformat()}
    remediations_0012 = await table(engine, "remediations")
    async with engine.begin() as conn:
        await conn.execute(sa.update(remediations_0012).where(remediations_0012.c.id == "held-node")
                           .values(return_request=request_))
    await upgrade(db_url)
    rem = await Repository(make_sessionmaker(engine)).get("held-node")
    assert rem is not None and rem.return_request == request_

    await downgrade(db_url, "0011")

    kept = await rows(engine, "remediations", "id")
    assert "return_request" not in kept[0]
    assert {r["id"]: r["state"] for r in kept} == states
    assert [(s["remediation_id"], s["status"]) for s in await rows(engine, "steps", "id")] == [("undoing", "running")]


def test_the_migrations_are_one_line_to_one_head() -> None:
    """`alembic heads` answers one head, every revision revises the one before it (no branch, no merge), and
    the file names carry their revision in order."""
    script = ScriptDirectory.from_config(alembic_config())
    revisions = list(reversed(list(script.walk_revisions())))
    assert script.get_heads() == [revisions[-1].revision] and script.get_bases() == ["0001"]
    for number, revision in enumerate(revisions, 1):
        assert revision.revision == f"{number:04d}", revision.revision
        assert revision.down_revision == (f"{number - 1:04d}" if number > 1 else None), revision.revision
        assert not revision.branch_labels and not revision.dependencies, revision.revision
        assert Path(revision.path).name.startswith(f"{number:04d}_"), revision.path


def schema(sync: sa.Connection) -> dict[str, Any]:
    """Tables with their columns, indexes, unique constraints and foreign keys, as the database reports them."""
    inspector = sa.inspect(sync)
    found: dict[str, Any] = {}
    for name in inspector.get_table_names():
        if name == "alembic_version":
            continue
        found[name] = {
            "columns": sorted((c["name"], str(c["type"]), bool(c["nullable"])) for c in inspector.get_columns(name)),
            "indexes": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"]))
                              for i in inspector.get_indexes(name)),
            "unique": sorted(tuple(u["column_names"]) for u in inspector.get_unique_constraints(name)),
            "foreign_keys": sorted((tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
                                   for f in inspector.get_foreign_keys(name)),
        }
    return found


DATA_ONLY = {"0011"}  # migrations that move rows and leave the schema as it was


async def test_each_migration_from_0009_goes_up_and_down_to_the_same_schema(db_url: str, engine: AsyncEngine) -> None:
    script = ScriptDirectory.from_config(alembic_config())
    later = [r.revision for r in reversed(list(script.walk_revisions())) if r.revision >= "0009"]
    assert later[0] == "0009" and len(later) >= 7  # 0009 .. 0015 at least
    await upgrade(db_url, "0008")
    for revision in later:
        previous = f"{int(revision) - 1:04d}"
        async with engine.connect() as conn:
            below = await conn.run_sync(schema)
        await upgrade(db_url, revision)
        async with engine.connect() as conn:
            above = await conn.run_sync(schema)
        assert (above == below) == (revision in DATA_ONLY), revision
        await downgrade(db_url, previous)
        async with engine.connect() as conn:
            assert await conn.run_sync(schema) == below, f"{revision} down"
        await upgrade(db_url, revision)
        async with engine.connect() as conn:
            assert await conn.run_sync(schema) == above, f"{revision} up again"

"""Approval decisions in the store: recorded once, on the request. Of concurrent decisions exactly one wins
(on PostgreSQL the deciders really run in parallel), a request whose remediation stopped waiting cannot be
decided, and an expiry is recorded on the request the same way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from remediator.engine.approval_decisions import approval_status, decision_of, step_approved
from remediator.store.db import make_engine, make_sessionmaker, upgrade
from remediator.store.repository import NewRemediation, Repository, utcnow
from tests.store.test_intake_store import payload

OWNER = "worker-a"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Repository]:
    url = store_url
    await upgrade(url)
    engine = make_engine(url)
    yield Repository(make_sessionmaker(engine))
    await engine.dispose()


async def waiting(
    repo: Repository, *, on_expiry: str = "abort", ttl: timedelta = timedelta(hours=1)
) -> tuple[str, int]:
    """A remediation in awaiting_approval for step 0 (`drain`): (remediation id, approval id)."""
    await repo.store_batch(payload())
    (alert,) = await repo.claim_alerts(OWNER, 10, timedelta(seconds=30))
    new = NewRemediation(
        rule="xid", playbook="drain-node", definitions_version="v1", target_kind="node", target_key="node/n1",
        node="n1", gpu_uuid=None, gpu_index=None, namespace=None, pod=None, params={},
        plan={"playbook": {"on_expiry": on_expiry, "steps": [{"name": "drain", "action": "drain"}]}},
        cooldown=None,
    )
    _, rem_id = await repo.record_firing(alert, new)
    assert await repo.claim_remediations(OWNER, 10, timedelta(seconds=30)) == [rem_id]
    # As the executor does: only an admitted (running) remediation asks before a step.
    await repo.transition(rem_id, "start", owner=OWNER, reason="guardrails allow")
    approval = await repo.open_approval(
        rem_id, OWNER, step_index=0, step_name="drain", token_hash="a" * 64, expires_at=utcnow() + ttl,
        requested_to=[], reason="step drain needs approval",
    )
    return rem_id, approval.id


async def moves(repo: Repository, rem_id: str) -> list[str]:
    return [e.kind for e in await repo.list_audit(remediation_id=rem_id) if e.kind.startswith("state.")]


async def test_of_concurrent_decisions_exactly_one_is_recorded(store: Repository) -> None:
    rem_id, approval_id = await waiting(store)
    won = await asyncio.gather(*(
        store.decide_approval(approval_id, decision="approved" if i % 2 else "rejected", actor=f"p{i}", source="api")
        for i in range(8)
    ))
    assert won.count(True) == 1
    winner = won.index(True)
    approval = await store.get_approval(approval_id)
    rem = await store.get(rem_id)
    assert approval is not None and rem is not None
    assert approval.decided_by == f"p{winner}" and approval.decision_source == "api"
    assert approval.decision == ("approved" if winner % 2 else "rejected")
    assert rem.state == ("running" if winner % 2 else "rejected")
    assert await moves(store, rem_id) == ["state.running", "state.awaiting_approval", f"state.{rem.state}"]
    assert decision_of(rem, await store.current_approval(rem_id)) == approval.decision


async def test_a_request_whose_remediation_was_cancelled_cannot_be_decided(store: Repository) -> None:
    rem_id, approval_id = await waiting(store)
    await store.transition(rem_id, "cancel", actor="bob", reason="cancelled through the API")
    assert not await store.decide_approval(approval_id, decision="approved", actor="alice", source="api")
    approval = await store.get_approval(approval_id)
    rem = await store.get(rem_id)
    assert approval is not None and rem is not None and rem.state == "cancelled"
    # The cancel closed the request as superseded, by the canceller; the late approval changed nothing.
    assert (approval.decision, approval.decided_by, approval.decision_source) == ("superseded", "bob", "cancel")
    assert approval_status(approval, rem, utcnow()) == "superseded"
    assert await moves(store, rem_id) == ["state.running", "state.awaiting_approval", "state.cancelled"]
    superseded = [e for e in await store.list_audit(remediation_id=rem_id) if e.kind == "approval.superseded"]
    assert [(e.actor, e.data) for e in superseded] == [("bob", {"approval_id": approval_id, "by": "cancel"})]


async def test_an_expired_request_is_decided_by_the_expiry_alone(store: Repository) -> None:
    rem_id, approval_id = await waiting(store, on_expiry="continue", ttl=timedelta(seconds=-1))
    assert await store.due_approvals(utcnow()) == [rem_id]
    assert not await store.decide_approval(approval_id, decision="rejected", actor="alice", source="api")
    assert await store.expire_approval(rem_id, proceed=True) == "running"
    assert await store.expire_approval(rem_id, proceed=True) is None
    approval = await store.current_approval(rem_id)
    rem = await store.get(rem_id)
    assert approval is not None and rem is not None
    assert (approval.decision, approval.decided_by, approval.decision_source) == ("expired", "controller", "expiry")
    # The playbook says continue: the executor runs the gated step without asking again.
    assert decision_of(rem, approval) == "approved" and step_approved(rem, approval, 0)
    assert not step_approved(rem, approval, 1)
    assert await store.due_approvals(utcnow()) == []

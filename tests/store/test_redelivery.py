"""A repeat of an alert whose remediation ended without running puts the alert back to be decided, once.

Against SQLite and PostgreSQL: which endings count (crashes, a context the API refused before any step) and
which do not (a step the playbook failed, success, still running, the alert resolved); duplicate deliveries
at once, from one replica and from two, put it back once; on PostgreSQL a delivery racing an uncommitted
put-back waits for it and then leaves the alert alone (made deterministic as in test_concurrent_delivery.py).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text, update

from remediator.store.db import make_engine, make_sessionmaker
from remediator.store.models import Remediation
from remediator.store.repository import Repository
from remediator.store.transactions import StoredBatch
from tests.store.test_approval_decisions import store, store_url  # noqa: F401  (fixtures)
from tests.store.test_concurrent_delivery import _wait_for_lock_waiter
from tests.store.test_decision_conflicts import new_on
from tests.store.test_intake_store import payload
from tests.store.test_postgres import pg_repo  # noqa: F401  (fixture)

CRASHED = {"state": "failed", "crashes": 1, "state_reason": "crashed 1 times in a row; last error: boom"}


async def decided(repo: Repository, **ending: Any) -> tuple[int, str]:
    """A first delivery decided into a remediation that then ended as `ending` says: (alert id, remediation id)."""
    await repo.store_batch(payload())
    (alert,) = await repo.claim_alerts("worker-a", 10, timedelta(seconds=30))
    outcome, rem_id = await repo.record_firing(alert, new_on("n1"))
    assert outcome == "started"
    ended = {} if ending.get("state") == "running" else {"finished_at": repo.clock(), "active_key": None}
    async with repo.transaction() as session:
        await session.execute(update(Remediation).where(Remediation.id == rem_id).values(**ended, **ending))
    return alert.id, rem_id


async def alert_states(repo: Repository) -> list[tuple[str, str | None]]:
    return [(a.state, a.outcome) for a in sorted(await repo.list_alerts(), key=lambda a: a.id)]


async def redelivered(repo: Repository) -> list[dict[str, Any]]:
    return [dict(e.data or {}) for e in await repo.list_audit() if e.kind == "alert.redelivered"]


async def repeats_from_two_replicas(repo: Repository, url: str, times: int) -> None:
    """Store the same payload `times` times from `repo` and from a second repository (another replica's) at once."""
    other_engine = make_engine(url)
    try:
        other = Repository(make_sessionmaker(other_engine))
        await asyncio.gather(*(r.store_batch(payload()) for _ in range(times) for r in (repo, other)))
    finally:
        await other_engine.dispose()


async def repeat_racing_a_put_back(repo: Repository, url: str, put_back: str, alert_id: int) -> StoredBatch:
    """Another replica runs `put_back` (SQL on alert :id) and holds it uncommitted while `repo` stores a repeat;
    once that delivery waits on the row the other commits: what the delivery stored."""
    other = make_engine(url)
    try:
        async with other.connect() as conn:
            tx = await conn.begin()
            await conn.execute(text(put_back), {"id": alert_id})
            second = asyncio.create_task(repo.store_batch(payload()))
            await _wait_for_lock_waiter(url)
            await tx.commit()
        return await asyncio.wait_for(second, 20)
    finally:
        await other.dispose()


@pytest.mark.parametrize(("ending", "again"), [
    (CRASHED, True),
    ({"state": "failed", "state_reason": "reading the context failed: Forbidden: pods is forbidden"}, True),
    ({"state": "failed", "state_reason": "step taint failed: Forbidden: nodes is forbidden"}, False),
    ({"state": "failed", "state_reason": None}, False),
    ({"state": "succeeded", "state_reason": "all steps succeeded"}, False),
    ({"state": "running", "state_reason": "waiting: kubernetes API answering 429 since 2026-12-02T10:00:00Z"}, False),
    ({**CRASHED, "alert_resolved": True}, False),
])
async def test_which_endings_decide_a_repeated_alert_again(
    store: Repository, ending: dict[str, Any], again: bool  # noqa: F811
) -> None:
    alert_id, rem_id = await decided(store, **ending)
    stored = await store.store_batch(payload())
    assert stored.repeats == 1  # still answered and counted as a repeat
    states = await alert_states(store)
    if not again:
        assert states == [("done", "started"), ("repeat", None)]
        assert not await redelivered(store)
        assert await store.claim_alerts("worker-a", 10, timedelta(seconds=30)) == []
        return
    assert states == [("new", None), ("repeat", None)]
    (event,) = await redelivered(store)
    assert event["alert_id"] == alert_id and event["reason"].startswith("re-delivered after ")
    assert event["reason"].endswith(": deciding again")
    (claimed,) = await store.claim_alerts("worker-a", 10, timedelta(seconds=30))
    assert claimed.id == alert_id
    # Decided again into a new remediation: the next repeat reads that one (running) and decides nothing.
    outcome, new_id = await store.record_firing(claimed, new_on("n1"))
    assert outcome == "started" and new_id != rem_id
    await store.store_batch(payload())
    assert await alert_states(store) == [("done", "started"), ("repeat", None), ("repeat", None)]
    assert len(await redelivered(store)) == 1


async def test_duplicate_repeats_at_once_put_the_alert_back_once(store: Repository) -> None:  # noqa: F811
    await decided(store, **CRASHED)
    await asyncio.gather(*(store.store_batch(payload()) for _ in range(6)))
    states = await alert_states(store)
    assert states[0] == ("new", None) and states[1:] == [("repeat", None)] * 6
    assert len(await redelivered(store)) == 1


@pytest.mark.postgres
async def test_two_replicas_storing_the_same_repeat_put_the_alert_back_once(
    pg_repo: Repository, pg_url: str  # noqa: F811
) -> None:
    await decided(pg_repo, **CRASHED)
    await repeats_from_two_replicas(pg_repo, pg_url, 4)
    states = await alert_states(pg_repo)
    assert states[0] == ("new", None) and states[1:] == [("repeat", None)] * 8
    assert len(await redelivered(pg_repo)) == 1


@pytest.mark.postgres
async def test_a_repeat_racing_an_uncommitted_put_back_leaves_the_alert_alone(
    pg_repo: Repository, pg_url: str  # noqa: F811
) -> None:
    """Another replica has put the alert back and not yet committed: this delivery's read still finds the alert
    decided, its update waits on the row, then finds it `new` and changes nothing."""
    alert_id, _ = await decided(pg_repo, **CRASHED)
    stored = await repeat_racing_a_put_back(pg_repo, pg_url, "UPDATE alerts SET state = 'new' WHERE id = :id", alert_id)
    assert stored.repeats == 1
    assert [a.state for a in sorted(await pg_repo.list_alerts(), key=lambda a: a.id)] == ["new", "repeat"]
    assert not await redelivered(pg_repo)  # the other replica's put-back is the only one

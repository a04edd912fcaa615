"""A decided batch that conflicts with another replica's remediation is recorded again, not alert by alert
(PostgreSQL; SQLite has one writer and takes no savepoint, so there the batch is recorded alert by alert).

The race is made deterministic: the batch's read of the active remediations is made stale (it "sees" none,
as a read made before the other replica committed), so its insert meets the other replica's committed
remediation on the unique active key. The batch must then link that alert to the other replica's
remediation and start the others, all in one transaction, with each audit event recorded once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from remediator.intake.models import AlertmanagerPayload
from remediator.store.decision_store import AlertOutcome, Started
from remediator.store.models import AlertRow
from remediator.store.repository import NewRemediation, Repository
from tests.helpers import am_alert, am_payload, xid_labels
from tests.store.test_approval_decisions import store, store_url  # noqa: F401  (fixtures)


def new_on(node: str) -> NewRemediation:
    return NewRemediation(
        rule="xid", playbook="reboot-node", definitions_version="v1", target_kind="node", target_key=f"node/{node}",
        node=node, gpu_uuid=None, gpu_index=None, namespace=None, pod=None, params={},
        plan={"playbook": {"steps": [{"name": "taint", "action": "taint"}]}}, cooldown=None,
    )


async def claimed(repo: Repository, count: int) -> list[AlertRow]:
    """`count` stored and claimed Xid 79 alerts as dcgm-exporter's series raise them, one GPU each."""
    for i in range(count):
        alert = am_alert(xid_labels(f"n{i + 1}", 79, uuid=f"GPU-8e6a1c2d-0000-4000-8000-00000000000{i}", gpu=str(i)))
        await repo.store_batch(AlertmanagerPayload.model_validate(am_payload(alert)))
    rows = await repo.claim_alerts("worker-b", 10, timedelta(seconds=30))
    assert len(rows) == count
    return sorted(rows, key=lambda r: r.id)


def stale_active_reads(repo: Repository, monkeypatch: pytest.MonkeyPatch, stale: int) -> list[int]:
    """The first `stale` reads of the active keys find nothing; returns the count of reads made."""
    real = repo._active_by_key
    calls: list[int] = []

    async def read(session: Any, keys: Any) -> dict[str, str]:
        calls.append(1)
        return {} if len(calls) <= stale else await real(session, keys)

    monkeypatch.setattr(repo, "_active_by_key", read)
    return calls


async def created_events(repo: Repository) -> list[str | None]:
    return [e.remediation_id for e in await repo.list_audit() if e.kind == "remediation.created"]


async def test_a_conflicting_batch_links_to_the_other_replicas_remediation(
    store: Repository, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    first, second, third = await claimed(store, 3)
    _, other = await store.record_firing(first, new_on("n1"))  # another replica, committed
    reads = stale_active_reads(store, monkeypatch, stale=1)

    alone: list[int] = []
    record_one = store._record_one

    async def one_by_one(row: AlertRow, verdict: Any) -> AlertOutcome:
        alone.append(row.id)
        return await record_one(row, verdict)

    monkeypatch.setattr(store, "_record_one", one_by_one)
    outcomes = await store.record_decisions([(second, Started(new_on("n1"))), (third, Started(new_on("n2")))])

    if store.dialect == "postgresql":
        assert alone == []  # not alert by alert:
        assert len(reads) == 2  # recorded twice, the stale attempt rolled back, then against the keys as they are
    else:
        # SQLite has one writer and the batch reads its keys under it, so it takes no savepoint: a conflict
        # (which only a stale read as made here can cause) fails the batch, which is recorded alert by alert.
        assert alone == [second.id, third.id]
    assert [(o.alert_id, o.outcome) for o in outcomes] == [(second.id, "linked"), (third.id, "started")]
    assert outcomes[0].remediation_id == other
    started = outcomes[1].remediation_id
    rems = {r.node: r for r in await store.list_remediations()}
    assert set(rems) == {"n1", "n2"} and rems["n1"].id == other and rems["n2"].id == started
    assert rems["n1"].linked_alerts == 1
    # The rolled-back attempt's events are gone: each remediation created once, the link recorded once.
    assert sorted(map(str, await created_events(store))) == sorted([other, str(started)])
    linked = [e for e in await store.list_audit() if e.kind == "alert.linked"]
    assert [(e.remediation_id, (e.data or {}).get("alert_id")) for e in linked] == [(other, second.id)]
    states = {a.id: (a.state, a.outcome) for a in await store.list_alerts()}
    assert states[second.id] == ("done", "linked") and states[third.id] == ("done", "started")


async def test_a_batch_that_keeps_conflicting_is_recorded_alert_by_alert(
    store: Repository, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    first, second, third = await claimed(store, 3)
    _, other = await store.record_firing(first, new_on("n1"))
    stale_active_reads(store, monkeypatch, stale=100)

    outcomes = await store.record_decisions([(second, Started(new_on("n1"))), (third, Started(new_on("n2")))])

    assert [(o.outcome, o.remediation_id == other) for o in outcomes] == [("linked", True), ("started", False)]
    assert len(await created_events(store)) == 2
    assert {r.node for r in await store.list_remediations()} == {"n1", "n2"}


async def test_the_rows_inserted_are_the_ones_built_before_the_transaction(
    store: Repository, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    first, second, third = await claimed(store, 3)
    real_prepare = store._prepared_starts
    prepared: dict[int, dict[str, Any]] = {}

    async def kept(decided: Any) -> dict[int, dict[str, Any]]:
        prepared.update(await real_prepare(decided))
        return prepared

    monkeypatch.setattr(store, "_prepared_starts", kept)
    outcomes = await store.record_decisions(
        [(first, Started(new_on("n1"))), (second, Started(new_on("n1"))), (third, Started(new_on("n2")))]
    )
    # One row per active key: the second alert of n1 links to the first one's remediation.
    assert sorted(prepared) == [first.id, third.id]
    one, two = prepared[first.id]["id"], prepared[third.id]["id"]
    assert [(o.outcome, o.remediation_id) for o in outcomes] == [("started", one), ("linked", one), ("started", two)]
    rems = {r.id: r for r in await store.list_remediations()}
    assert set(rems) == {prepared[first.id]["id"], prepared[third.id]["id"]}
    assert rems[prepared[first.id]["id"]].linked_alerts == 1


async def test_a_row_built_before_another_replica_took_its_key_is_not_inserted(
    store: Repository, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    first, second = await claimed(store, 2)
    real_prepare = store._prepared_starts
    others: list[str] = []

    async def prepare_then_lose_the_race(decided: Any) -> dict[int, dict[str, Any]]:
        prepared = await real_prepare(decided)  # n1 was free: its row is built
        _, other = await store.record_firing(first, new_on("n1"))  # another replica starts n1 before the commit
        others.append(other)
        return prepared

    monkeypatch.setattr(store, "_prepared_starts", prepare_then_lose_the_race)
    outcomes = await store.record_decisions([(second, Started(new_on("n1")))])

    assert [(o.outcome, o.remediation_id) for o in outcomes] == [("linked", others[0])]
    assert [r.id for r in await store.list_remediations()] == others
    assert await created_events(store) == others

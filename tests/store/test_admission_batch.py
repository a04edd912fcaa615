"""An admission batch reads its remediations' rows in one statement, and a request whose remediation is gone
or leased to another replica fails alone while the rest of the batch is admitted, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from remediator.engine.guardrails import Verdict
from remediator.store.decision_store import Lease, Started
from remediator.store.remediation_store import AdmissionRequest
from remediator.store.repository import LeaseLost, Repository
from tests.store.test_approval_decisions import store, store_url  # noqa: F401  (fixtures)
from tests.store.test_decision_conflicts import claimed, new_on

ALLOW = Verdict(allow=True, name="ok", reason="guardrails allow", quarantines=True)


def request(rem_id: str, owner: str) -> AdmissionRequest:
    async def facts(_session: Any, _counts: Any) -> Any:
        return None  # `decide` below answers without facts

    return AdmissionRequest(rem_id, owner, lambda _facts: ALLOW, facts)


async def test_a_batch_reads_its_rows_once_and_a_lost_lease_fails_alone(store: Repository) -> None:  # noqa: F811
    rows = await claimed(store, 3)
    mine = Lease("worker-a", timedelta(minutes=1), limit=2)  # the third is left unleased
    _, leased = await store.record_and_lease(
        [(row, Started(new_on(f"n{i + 1}"))) for i, row in enumerate(rows)], mine
    )
    first, second = (rem.id for rem in leased)
    unleased = next(r.id for r in await store.remediation_summaries(limit=10) if r.id not in (first, second))

    reads: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().startswith("SELECT") and "FROM remediations" in statement and ".id IN" in statement:
            reads.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        results = await store.admit_many([
            request(second, "worker-a"), request("no-such-remediation", "worker-a"), request(unleased, "worker-a"),
            request(first, "worker-a"),
        ])
    finally:
        event.remove(Engine, "before_cursor_execute", count)

    assert len(reads) == 1
    admitted_second, gone, not_ours, admitted_first = results
    assert isinstance(gone, KeyError) and isinstance(not_ours, LeaseLost)
    for result, rem_id in ((admitted_second, second), (admitted_first, first)):
        assert not isinstance(result, BaseException)
        rem, verdict, changed = result
        assert (rem.id, rem.state, rem.quarantined, verdict, changed) == (rem_id, "running", True, ALLOW, True)
    states = {r.id: r.state for r in await store.remediation_summaries(limit=10)}
    assert states[unleased] == "pending"

"""An admission batch reads its remediations' rows in one statement, a request whose remediation is gone or
leased to another replica fails alone while the rest of the batch is admitted, and the batch decides on the
pause flag as it is under the admission lock; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, insert
from sqlalchemy.engine import Engine

from remediator.domain.guardrails import BREAKER_REASON, GuardrailFacts, Verdict
from remediator.errors import LeaseLost
from remediator.store import remediation_store
from remediator.store.admission import AdmissionReads
from remediator.store.decision_store import Lease, Started
from remediator.store.flag_store import PAUSE_FLAG
from remediator.store.models import ControllerState
from remediator.store.read_store import SteadyCounts, SteadyQuery
from remediator.store.repository import Repository, utcnow
from remediator.store.step_store import BeginStep
from tests.store.test_approval_decisions import store, store_url  # noqa: F401  (fixtures)
from tests.store.test_decision_conflicts import claimed, new_on

ALLOW = Verdict(allow=True, name="ok", reason="guardrails allow", quarantines=True)


@dataclass(frozen=True)
class AdmissionRequest:
    """An admission (store/admission.py `Admission`) whose facts and verdict are the test's functions."""

    rem_id: str
    owner: str
    decide: Callable[[GuardrailFacts], Verdict]
    facts_of: Callable[[AdmissionReads, SteadyCounts | None], Awaitable[Any]]
    context: dict[str, Any] | None = None
    steady: SteadyQuery | None = None
    first_step: BeginStep | None = None

    async def facts(self, reads: AdmissionReads, counts: SteadyCounts | None) -> GuardrailFacts:
        return await self.facts_of(reads, counts)  # type: ignore[no-any-return]  # the test answers None

    def verdict(self, facts: GuardrailFacts) -> Verdict:
        return self.decide(facts)


@contextmanager
def statements(wanted: Callable[[str], bool]) -> Iterator[list[str]]:
    """The SQL statements run inside the block that `wanted` picks."""
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if wanted(statement.lstrip()):
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", count)


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

    with statements(lambda sql: sql.startswith("SELECT") and "FROM remediations" in sql and ".id IN" in sql) as reads:
        results = await store.admit_many([
            request(second, "worker-a"), request("no-such-remediation", "worker-a"), request(unleased, "worker-a"),
            request(first, "worker-a"),
        ])

    assert len(reads) == 1
    admitted_second, gone, not_ours, admitted_first = results
    assert isinstance(gone, KeyError) and isinstance(not_ours, LeaseLost)
    for result, rem_id in ((admitted_second, second), (admitted_first, first)):
        assert not isinstance(result, BaseException)
        rem, verdict, changed = result
        assert (rem.id, rem.state, rem.quarantined, verdict, changed) == (rem_id, "running", True, ALLOW, True)
    states = {r.id: r.state for r in await store.remediation_summaries(limit=10)}
    assert states[unleased] == "pending"


async def test_the_batch_decides_on_the_pause_flag_as_it_is_under_the_lock(
    store: Repository, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """The kill switch is read under the admission lock, after each remediation's own facts: a pause that
    lands after those reads is what the batch decides on (an admitted first step does not read it again)."""
    rows = await claimed(store, 1)
    _, (rem,) = await store.record_and_lease([(rows[0], Started(new_on("n1")))], Lease("w", timedelta(minutes=1), 1))
    real = remediation_store.steady_counts

    async def then_paused(session: Any, queries: Any) -> Any:
        answers = await real(session, queries)
        await session.execute(insert(ControllerState).values(
            key=PAUSE_FLAG, value={"paused": True, "by": "oncall"}, updated_at=utcnow()))
        return answers

    monkeypatch.setattr(remediation_store, "steady_counts", then_paused)
    seen: list[Any] = []

    async def facts(_session: Any, counts: Any) -> Any:
        seen.append(counts)

    now = utcnow()
    steady = SteadyQuery(override_key="override:x", fingerprint="f", flap_since=now, node="n1", node_since=now,
                         exclude=rem.id)
    (result,) = await store.admit_many([AdmissionRequest(rem.id, "w", lambda _f: ALLOW, facts, steady=steady)])
    assert not isinstance(result, BaseException)
    assert seen[0].pause == {"paused": True, "by": "oncall"}


async def test_a_batch_looks_up_its_first_steps_rows_once_and_resumes_a_row_that_exists(
    store: Repository,  # noqa: F811
) -> None:
    rows = await claimed(store, 3)
    _, leased = await store.record_and_lease(
        [(row, Started(new_on(f"n{i + 1}"))) for i, row in enumerate(rows)], Lease("w", timedelta(minutes=1), 3)
    )
    ids = [rem.id for rem in leased]
    first = BeginStep("forward", 0, "taint", "taint", {"key": "remediator.io/gpu-unhealthy"}, {"before": []})
    # A row left by an earlier attempt on the first remediation: resumed, not created again.
    await store.begin_step(ids[0], "w", phase="forward", idx=0, name="taint", action="taint",
                           params={"key": "old"}, progress={"saved": True})
    with statements(lambda sql: sql.startswith("SELECT") and "FROM steps" in sql) as lookups:
        results = await store.admit_many([
            AdmissionRequest(rem_id, "w", lambda _f: ALLOW, request(rem_id, "w").facts, first_step=first)
            for rem_id in ids
        ])

    assert len(lookups) == 1
    assert all(not isinstance(r, BaseException) and r[0].state == "running" for r in results)
    steps = await store.steps_for(ids)
    resumed, *created = (steps[rem_id] for rem_id in ids)
    assert [(s.attempts, s.params, s.progress) for s in resumed] == [(2, first.params, {"saved": True})]
    assert [[(s.attempts, s.params, s.progress) for s in rows] for rows in created] == [
        [(1, first.params, {"before": []})]
    ] * 2


async def test_a_batch_reads_the_queue_for_room_once_and_keeps_it_as_it_holds_and_admits(
    store: Repository,  # noqa: F811
) -> None:
    """The queue ahead of each remediation is what the database would say after the batch's earlier
    decisions: a held one admitted leaves it, one the batch holds for the breaker joins it."""
    rows = await claimed(store, 4)
    _, leased = await store.record_and_lease(
        [(row, Started(new_on(f"n{i}"))) for i, row in enumerate(rows)], Lease("w", timedelta(minutes=1), 4)
    )
    rems = sorted(leased, key=lambda r: (r.created_at, r.id))
    hold = Verdict(allow=False, name="circuit_breaker", reason=f"{BREAKER_REASON} 1 of 1 nodes", quarantines=True)
    (first,) = await store.admit_many([AdmissionRequest(rems[0].id, "w", lambda _f: hold, request("", "w").facts)])
    assert not isinstance(first, BaseException) and first[0].state == "held"

    seen: dict[str, set[str]] = {}

    def asking(rem: Any, verdict: Verdict) -> AdmissionRequest:
        async def facts(reads: AdmissionReads, _counts: Any) -> Any:
            seen[rem.id] = await reads.held_for_room_before(rem.id, rem.created_at, rem.node, BREAKER_REASON)

        return AdmissionRequest(rem.id, "w", lambda _f: verdict, facts)

    with statements(lambda sql: sql.startswith("SELECT") and "remediations.state =" in sql) as queue_reads:
        results = await store.admit_many([
            asking(rems[3], ALLOW), asking(rems[1], hold), asking(rems[0], ALLOW), asking(rems[2], ALLOW),
        ])

    assert all(not isinstance(r, BaseException) for r in results)
    assert len(queue_reads) == 1
    # Decided oldest first: rems[0] (held before) is admitted and leaves the queue; rems[1] joins it.
    assert [seen[r.id] for r in rems] == [set(), set(), {rems[1].node}, {rems[1].node}]
    states = {r.id: r.state for r in await store.remediation_summaries(limit=10)}
    assert [states[r.id] for r in rems] == ["running", "held", "running", "running"]

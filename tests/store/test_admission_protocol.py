"""The store's admission seam (store/admission.py): `admit_many` takes any `Admission` (here the test's own,
not the engine's), asks it for its facts with the reads of the admitting transaction and applies its verdict.
A request decided later in the batch sees what an earlier one did (the quarantine it started), before the
batch commits; a held remediation re-checked for the same reason is reported unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from remediator.domain.guardrails import GuardrailFacts, Verdict, guardrail_verdict
from remediator.domain.states import State
from remediator.store.admission import AdmissionReads
from remediator.store.decision_store import Lease, Started
from remediator.store.models import Remediation
from remediator.store.read_store import SteadyCounts, SteadyQuery
from remediator.store.repository import Repository
from remediator.store.step_store import BeginStep
from tests.store.test_approval_decisions import store, store_url  # noqa: F401  (fixtures)
from tests.store.test_decision_conflicts import claimed, new_on


@dataclass
class OneNodeAtATime:
    """An admission whose breaker allows one quarantined node, deciding with the domain's guardrails; it keeps
    what it read in the admitting transaction."""

    rem: Remediation
    owner: str = "w"
    context: dict[str, object] | None = None
    steady: SteadyQuery | None = None
    first_step: BeginStep | None = None
    seen: list[tuple[frozenset[str], int, set[str]]] = field(default_factory=list)

    @property
    def rem_id(self) -> str:
        return self.rem.id

    async def facts(self, reads: AdmissionReads, counts: SteadyCounts | None) -> GuardrailFacts:
        now = datetime.now(UTC)
        quarantined = frozenset(await reads.quarantined_nodes())
        starts = await reads.recent_quarantine_starts(now - timedelta(hours=1))
        window = {node for node, *_ in await reads.window_faults(now - timedelta(hours=1))}
        self.seen.append((quarantined, starts, window))
        return GuardrailFacts(
            now=now, paused=False, node=self.rem.node, node_excluded=False, quarantines=True,
            quarantined_nodes=quarantined, limit_nodes=1, gpu_nodes=10, recent_quarantine_starts=starts,
            rate_limit=0,
        )

    def verdict(self, facts: GuardrailFacts) -> Verdict:
        return guardrail_verdict(facts)


async def test_a_batch_asks_each_admission_in_order_and_applies_its_verdict(store: Repository) -> None:  # noqa: F811
    rows = await claimed(store, 3)
    _, leased = await store.record_and_lease(
        [(row, Started(new_on(f"n{i + 1}"))) for i, row in enumerate(rows)], Lease("w", timedelta(minutes=1), 3)
    )
    first, second, third = (OneNodeAtATime(rem) for rem in sorted(leased, key=lambda r: (r.created_at, r.id)))

    results = await store.admit_many([second, third, first])  # decided oldest first, whatever the order given

    started, held, held_too = results[2], results[0], results[1]
    assert not isinstance(started, BaseException) and not isinstance(held, BaseException)
    assert not isinstance(held_too, BaseException)
    assert started[0].state == State.RUNNING and started[0].quarantined and started[1].allow and started[2]
    assert held[0].state == State.HELD and held[1].name == "circuit_breaker" and held[2]
    assert held_too[0].state == State.HELD
    nodes = {first.rem.node, second.rem.node, third.rem.node}
    # The first saw no quarantine; the next ones saw the first's, started in this same transaction.
    assert first.seen == [(frozenset(), 0, nodes)]
    assert second.seen == [(frozenset({first.rem.node}), 1, nodes)]
    assert third.seen == [(frozenset({first.rem.node}), 1, nodes)]

    states = {r.id: r.state for r in await store.remediation_summaries(limit=10)}
    assert states == {first.rem.id: State.RUNNING, second.rem.id: State.HELD, third.rem.id: State.HELD}

    # A re-check of a held one, for the same reason: still held, not changed; its facts are read afresh.
    (again,) = await store.admit_many([second])
    assert not isinstance(again, BaseException)
    assert again[0].state == State.HELD and again[2] is False
    assert second.seen[-1][0] == frozenset({first.rem.node})


@dataclass
class ReadsTheWindow(OneNodeAtATime):
    """An admission that reads the storm window's keys and faults in the admitting transaction."""

    keys: list[list[tuple[str, bool]]] = field(default_factory=list)
    faults: list[dict[str, object]] = field(default_factory=list)

    async def facts(self, reads: AdmissionReads, counts: SteadyCounts | None) -> GuardrailFacts:
        since = datetime.now(UTC) - timedelta(hours=1)
        keys = await reads.window_keys(since)
        self.keys.append(sorted(keys))
        self.faults.append(dict(await reads.window_faults_of([rid for rid, _ in keys])))
        return await super().facts(reads, counts)


async def test_the_window_keys_say_which_rows_have_their_context_stored(store: Repository) -> None:  # noqa: F811
    rows = await claimed(store, 2)
    _, leased = await store.record_and_lease(
        [(row, Started(new_on(f"n{i + 1}"))) for i, row in enumerate(rows)], Lease("w", timedelta(minutes=1), 2)
    )
    first, second = sorted(leased, key=lambda r: (r.created_at, r.id))
    pods = {"pods": [{"namespace": "ml", "name": "p", "owners": [{"kind": "Job", "name": "train"}]}]}
    admission = ReadsTheWindow(first, context=pods)

    (result,) = await store.admit_many([admission])

    assert not isinstance(result, BaseException)
    # In the admitting transaction the admitted one's context is stored already, the other's not yet.
    assert admission.keys == [sorted([(first.id, True), (second.id, False)])]
    faults = admission.faults[0]
    assert set(faults) == {first.id, second.id}
    node, _alertname, _plan, _labels, context, _created = faults[first.id]  # type: ignore[misc]
    assert (node, context) == ("n1", pods)
    assert faults[second.id][4] == {}  # type: ignore[index]

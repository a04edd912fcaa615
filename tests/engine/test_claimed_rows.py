"""A claimed remediation is driven from the row its claim returned: the first thing its drive does with the
store is to admit it, not to read it again. An idle worker does not even claim what it just decided: the
deciding transaction leases it, and the next dispatch drives it (two transactions less before the taint)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.helpers import am_alert, am_payload, xid_labels


def record_calls(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, Any]], *names: str) -> None:
    """Each call of these store methods is appended to `calls` as (name, what it returned), in call order."""
    repo = cluster.rt.repo
    for name in names:
        real = getattr(repo, name)

        def record(real: Any = real, name: str = name) -> Any:
            async def call(*args: Any, **kwargs: Any) -> Any:
                at = len(calls)  # the call's place in call order; what it returns is filled in after
                calls.append((name, None))
                result = await real(*args, **kwargs)
                calls[at] = (name, result)
                return result
            return call

        monkeypatch.setattr(repo, name, record())


async def test_a_claimed_remediation_is_admitted_without_being_read_again(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    monkeypatch.setattr(cluster.worker, "_handover", lambda: None)  # as a busy worker: what it decides is claimed
    calls: list[tuple[str, Any]] = []
    record_calls(cluster, monkeypatch, calls, "get", "admit_many", "claim_remediation_rows")
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    names = [name for name, _ in calls]
    first_claim = names.index("claim_remediation_rows")
    assert "admit_many" in names[first_claim:]
    assert "get" not in names[first_claim : names.index("admit_many")]


async def test_an_idle_worker_drives_what_it_decided_without_claiming_it(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leased in the deciding transaction (`DecisionStore.record_and_lease`), started by the next dispatch."""
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    calls: list[tuple[str, Any]] = []
    record_calls(cluster, monkeypatch, calls, "claim_remediation_rows", "record_and_lease", "begin_step",
                 "due_approvals", "count_by_state")
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    steps = [s["name"] for s in rem["steps"] if s["phase"] == "forward"]
    assert steps[0] == "taint"
    claimed = {row.id for name, rows in calls if name == "claim_remediation_rows" for row in rows}
    assert rem["id"] not in claimed  # driven from decision to the end without a claim
    names = [name for name, _ in calls]
    # Nor does an empty claim, the approval sweep or the gauges' count run beside the drive it handed over,
    # between the decision and the first step; they come in a later iteration.
    beside = names[names.index("record_and_lease") : names.index("begin_step")]
    assert not {"claim_remediation_rows", "due_approvals", "count_by_state"} & set(beside), beside
    assert "due_approvals" in names[names.index("begin_step"):]

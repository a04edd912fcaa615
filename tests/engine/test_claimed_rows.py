"""A claimed remediation is driven from the row its claim returned: the first thing its drive does with the
store is to admit it, not to read it again. An idle worker does not even claim what it just decided: the
deciding transaction leases it, and the next dispatch drives it (two transactions less before the taint)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_pipeline import gpu_node
from tests.helpers import am_alert, am_payload, xid_labels


async def test_a_claimed_remediation_is_admitted_without_being_read_again(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    repo = cluster.rt.repo
    calls: list[str] = []
    for name in ("get", "admit_many", "claim_remediation_rows"):
        real = getattr(repo, name)

        def record(real: Any = real, name: str = name) -> Any:
            async def call(*args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                return await real(*args, **kwargs)
            return call

        monkeypatch.setattr(repo, name, record())
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    first_claim = calls.index("claim_remediation_rows")
    assert "admit_many" in calls[first_claim:]
    assert "get" not in calls[first_claim : calls.index("admit_many")]


async def test_an_idle_worker_drives_what_it_decided_without_claiming_it(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leased in the deciding transaction (`DecisionStore.record_and_lease`), started by the next dispatch."""
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    repo = cluster.rt.repo
    claimed: list[str] = []
    claim = repo.claim_remediation_rows

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        rows = await claim(*args, **kwargs)
        claimed.extend(r.id for r in rows)
        return rows

    monkeypatch.setattr(repo, "claim_remediation_rows", recorded)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    steps = [s["name"] for s in rem["steps"] if s["phase"] == "forward"]
    assert steps[0] == "taint"
    assert rem["id"] not in claimed  # driven from decision to the end without a claim

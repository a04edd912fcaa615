"""The first step right after admission: it does not read again what the admission just read (the pause flag)
or what cannot exist yet (earlier steps' rows), and a taint's prior state, observed before the step row
begins, is stored with the row (no checkpoint write between beginning the step and patching the node)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_claimed_rows import record_calls
from tests.engine.test_pipeline import gpu_node
from tests.helpers import am_alert, am_payload, xid_labels


async def test_the_first_step_after_admission_reads_nothing_again_and_stores_the_prior_taint_with_its_row(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    earlier = {"key": "remediator.io/gpu-unhealthy", "value": "xid-31", "effect": "NoSchedule"}
    cluster.fake.write("nodes", None, "gpu-1", {"spec": {"taints": [earlier]}})
    calls: list[tuple[str, Any]] = []
    record_calls(cluster, monkeypatch, calls, "admit_many", "get_flag", "steps", "begin_step", "checkpoint_step")
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    names = [name for name, _ in calls]
    admitted, first_begin = names.index("admit_many"), names.index("begin_step")
    assert admitted < first_begin
    assert names[admitted:first_begin] == ["admit_many"]  # no pause flag, no step rows read in between
    taint_row = calls[first_begin][1]
    assert (taint_row.name, taint_row.idx) == ("taint", 0)
    assert taint_row.progress == {"prior": {"previous": {"value": "xid-31"}, "marked": True}}
    assert "checkpoint_step" not in names[first_begin : names.index("begin_step", first_begin + 1)]
    taint = next(s for s in rem["steps"] if s["name"] == "taint" and s["phase"] == "forward")
    assert taint["output"]["previous"] == {"value": "xid-31"}


async def test_a_resumed_step_keeps_the_progress_it_saved_over_a_new_observation(make_cluster: MakeCluster) -> None:
    cluster: Cluster = await make_cluster()
    gpu_node(cluster.fake)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.worker.process_alerts()
    repo, owner = cluster.rt.repo, cluster.rt.owner
    # Decided by an idle worker: leased to it in the deciding transaction, not yet driven.
    (claimed,) = cluster.worker._handed
    step = {"phase": "forward", "idx": 0, "name": "taint", "action": "taint", "params": {}}
    first = await repo.begin_step(claimed.id, owner, **step, progress={"prior": {"previous": None}})
    again = await repo.begin_step(claimed.id, owner, **step, progress={"prior": {"previous": {"value": "ours"}}})
    assert first.progress == again.progress == {"prior": {"previous": None}}
    assert again.attempts == 2

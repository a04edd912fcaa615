"""The first step of a new remediation: prepared before its admission and begun in the admitting transaction
(engine/step_lifecycle.py), its prior state observed from the node object the context read a moment before, so
between the admission and the taint patch there is no transaction and no Kubernetes read; a remediation the
breaker holds begins nothing, and a crash after the admission resumes the begun row with what it observed."""

from __future__ import annotations

from typing import Any

import pytest

from remediator.engine.executor import Executor
from tests.engine.conftest import Cluster, MakeCluster
from tests.engine.test_claimed_rows import record_calls
from tests.engine.test_pipeline import gpu_node
from tests.helpers import am_alert, am_payload, xid_labels

TAINT_KEY = "remediator.io/gpu-unhealthy"


def tainted_gpu_node(cluster: Cluster) -> dict[str, str]:
    """GPU node gpu-1 carrying an earlier taint with the key the playbook's taint step writes; that taint."""
    gpu_node(cluster.fake)
    earlier = {"key": TAINT_KEY, "value": "xid-31", "effect": "NoSchedule"}
    cluster.fake.write("nodes", None, "gpu-1", {"spec": {"taints": [earlier]}})
    return earlier


async def test_the_admission_begins_the_first_step_with_the_prior_taint_and_nothing_runs_in_between(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster()
    tainted_gpu_node(cluster)
    calls: list[tuple[str, Any]] = []
    record_calls(
        cluster, monkeypatch, calls, "admit_many", "get_flag", "steps", "begin_step", "checkpoint_step", "finish_step"
    )
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    names = [name for name, _ in calls]
    begun = [row for name, row in calls if name == "begin_step"]
    assert begun and all((row.phase, row.idx) != ("forward", 0) for row in begun)  # the admission began step 0
    # Nothing reaches the store between the admission and the taint's end: no pause flag, no step rows, no
    # begin and no checkpoint.
    admitted = names.index("admit_many")
    assert names[admitted:names.index("finish_step") + 1] == ["admit_many", "finish_step"]
    (taint_row,) = [r for r in await cluster.rt.repo.steps(rem["id"]) if (r.phase, r.idx) == ("forward", 0)]
    assert (taint_row.name, taint_row.attempts) == ("taint", 1)
    assert taint_row.progress == {"prior": {"previous": {"value": "xid-31"}, "marked": True}}
    taint = next(s for s in rem["steps"] if s["name"] == "taint" and s["phase"] == "forward")
    assert taint["output"]["previous"] == {"value": "xid-31"}
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    kinds = [e["kind"] for e in audit]
    begun_at = kinds.index("step.started")
    assert kinds.index("state.running") < kinds.index("quarantine.started") < begun_at  # as one transaction wrote them
    assert audit[begun_at]["data"]["step"] == "taint" and audit[begun_at]["data"]["attempt"] == 1

    # The node was read once (the context) before the taint patch: the observation came from that read.
    node_calls = [c for c in cluster.fake.calls if c.plural == "nodes" and c.name == "gpu-1"]
    patch_at = next(i for i, c in enumerate(node_calls) if c.verb == "patch")
    assert [c.verb for c in node_calls[:patch_at]] == ["get"]
    assert node_calls[patch_at].body["metadata"]["resourceVersion"]  # guarded: a change since is a 409


async def test_a_remediation_the_breaker_holds_begins_no_step_and_begins_it_the_usual_way_when_admitted(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster(max_quarantined_nodes="1")
    for name in ("gpu-1", "gpu-2"):
        cluster.fake.add_node(name, labels={"nvidia.com/gpu.present": "true"})
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()
    await cluster.post(am_payload(am_alert(xid_labels("gpu-2", 79))))
    await cluster.settle()
    by_node = {r["node"]: r for r in (await cluster.api.get("/api/v1/remediations")).json()}
    held = by_node["gpu-2"]
    assert held["state"] == "held"
    assert await cluster.rt.repo.steps(held["id"]) == []

    calls: list[tuple[str, Any]] = []
    record_calls(cluster, monkeypatch, calls, "begin_step")
    cluster.rt.settings = cluster.rt.settings.model_copy(update={"max_quarantined_nodes": "2"})
    await cluster.rt.repo.wake_held()
    await cluster.settle()
    first = next(row for name, row in calls if name == "begin_step" and row.remediation_id == held["id"])
    assert (first.name, first.idx, first.attempts) == ("taint", 0, 1)
    assert first.progress["prior"]["previous"] is None  # observed by the step itself, stored with its row


async def test_a_crash_after_the_admission_resumes_the_begun_first_step_with_what_it_observed(
    make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Cluster = await make_cluster()
    earlier = tainted_gpu_node(cluster)
    real_forward = Executor._forward
    crashes: list[str] = []

    async def crash_once(self: Executor, rem: Any, **kwargs: Any) -> Any:
        if not crashes:
            crashes.append(rem.id)
            # Between the admission's commit and the patch, someone else changed the taint: the resumed step
            # must restore what was there before the remediation, not what it finds now.
            cluster.fake.write("nodes", None, "gpu-1", {"spec": {"taints": [{**earlier, "value": "other"}]}})
            raise RuntimeError("process died after the admission")
        return await real_forward(self, rem, **kwargs)

    monkeypatch.setattr(Executor, "_forward", crash_once)
    monkeypatch.setattr(cluster.rt.settings, "crash_backoff", cluster.rt.settings.crash_backoff * 0)
    await cluster.post(am_payload(am_alert(xid_labels("gpu-1", 79))))
    await cluster.settle()
    await cluster.rt.repo.wake_held()
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert crashes and rem["state"] == "succeeded", rem["state_reason"]
    (taint_row,) = [r for r in await cluster.rt.repo.steps(rem["id"]) if (r.phase, r.idx) == ("forward", 0)]
    assert taint_row.attempts == 2
    assert taint_row.progress == {"prior": {"previous": {"value": "xid-31"}, "marked": True}}
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

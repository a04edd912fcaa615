"""nodes/status as a real apiserver serves it: the subresource writes only status, the main resource never
writes status, and strategic merge merges status.conditions by `type`."""

from __future__ import annotations

import pytest

from tests.fakekube import FakeKube
from tests.fakekube_tests.conftest import Raw

NODE = "/api/v1/nodes/n1"
STATUS = NODE + "/status"
GPU_FALSE = {
    "type": "GPUHealthy", "status": "False", "reason": "Xid79", "message": "GPU 0 fell off the bus",
    "lastHeartbeatTime": "2026-12-03T10:00:00Z", "lastTransitionTime": "2026-12-03T10:00:00Z",
}


@pytest.fixture
def node(fake_kube: FakeKube) -> dict:
    return fake_kube.add_node("n1", labels={"team": "a"})


def kinds(node: dict) -> list[str]:
    return [c["type"] for c in node["status"]["conditions"]]


async def test_a_status_patch_merges_conditions_by_type_and_changes_nothing_else(
    raw: Raw, fake_kube: FakeKube, node: dict
) -> None:
    before = fake_kube.node("n1") or {}
    status, after = await raw.smp(STATUS, {
        "metadata": {"labels": {"sneaky": "1"}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [GPU_FALSE]},
    })
    assert status == 200
    assert kinds(after) == ["Ready", "GPUHealthy"]  # Ready kept, GPUHealthy added
    assert after["status"]["conditions"][1] == GPU_FALSE
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["spec"] == before["spec"] and not after["spec"].get("unschedulable")
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])

    # The same type again replaces that entry in place; the others stay.
    healthy = {**GPU_FALSE, "status": "True", "reason": "Recovered", "message": ""}
    _, again = await raw.smp(STATUS, {"status": {"conditions": [healthy]}})
    assert kinds(again) == ["Ready", "GPUHealthy"]
    assert again["status"]["conditions"][0] == before["status"]["conditions"][0]
    assert again["status"]["conditions"][1]["reason"] == "Recovered"


async def test_status_in_a_patch_of_the_node_itself_is_ignored(raw: Raw, fake_kube: FakeKube, node: dict) -> None:
    status, after = await raw.smp(NODE, {
        "metadata": {"labels": {"b": "1"}}, "status": {"conditions": [GPU_FALSE]},
    })
    assert status == 200
    assert after["metadata"]["labels"]["b"] == "1"
    assert kinds(after) == ["Ready"]
    assert kinds(fake_kube.node("n1") or {}) == ["Ready"]


async def test_a_stale_resource_version_on_status_is_a_conflict(raw: Raw, fake_kube: FakeKube, node: dict) -> None:
    _, current = await raw.get(NODE)
    await raw.smp(NODE, {"metadata": {"labels": {"b": "1"}}})
    status, body = await raw.smp(STATUS, {
        "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
        "status": {"conditions": [GPU_FALSE]},
    })
    assert status == 409 and body["reason"] == "Conflict"
    assert kinds(fake_kube.node("n1") or {}) == ["Ready"]


async def test_a_condition_without_its_merge_key_or_with_a_bad_time_is_refused(
    raw: Raw, fake_kube: FakeKube, node: dict
) -> None:
    no_type = {k: v for k, v in GPU_FALSE.items() if k != "type"}
    status, _ = await raw.smp(STATUS, {"status": {"conditions": [no_type]}})
    assert status == 422
    bad_time = {**GPU_FALSE, "lastTransitionTime": "now"}
    status, body = await raw.smp(STATUS, {"status": {"conditions": [bad_time]}})
    assert status == 400 and "lastTransitionTime" in body["message"]
    assert kinds(fake_kube.node("n1") or {}) == ["Ready"]


async def test_status_writes_are_in_the_history_with_their_subresource(
    raw: Raw, fake_kube: FakeKube, node: dict
) -> None:
    await raw.smp(STATUS, {"status": {"conditions": [GPU_FALSE]}})
    [write] = fake_kube.writes("nodes")
    assert (write.verb, write.subresource, write.status) == ("patch", "status", 200)
    assert [c.object and kinds(c.object) for c in fake_kube.history("nodes")][-1] == ["Ready", "GPUHealthy"]

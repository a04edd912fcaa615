"""set_node_condition and its revert, through the fake apiserver's nodes/status subresource."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from remediator.actions.conditions import ClearNodeCondition, SetNodeCondition
from remediator.actions.registry import default_registry
from tests.actions.conftest import NODE, Checkpoints, MakeCtx
from tests.fakekube import FakeKube

FALSE = {"status": False, "reason": "Xid79", "message": "GPU GPU-1 fell off the bus"}


def condition(fake: FakeKube, kind: str = "GPUHealthy") -> dict[str, Any] | None:
    node = fake.node(NODE) or {}
    return next((c for c in node["status"].get("conditions", []) if c["type"] == kind), None)


def status_writes(fake: FakeKube) -> list[Any]:
    return [c for c in fake.writes("nodes") if c.subresource == "status"]


async def set_condition(make_ctx: MakeCtx, **params: Any) -> Any:
    action = SetNodeCondition()
    return await action.run(make_ctx(), action.parse(params))


async def test_sets_the_condition_through_the_status_subresource_only(
    make_ctx: MakeCtx, fake_kube: FakeKube, node: dict[str, Any]
) -> None:
    result = await set_condition(make_ctx, **FALSE)
    assert result.changed and result.output["previous"] is None
    written = condition(fake_kube)
    assert written is not None
    assert {k: written[k] for k in ("status", "reason", "message")} == {
        "status": "False", "reason": "Xid79", "message": "GPU GPU-1 fell off the bus",
    }
    assert written["lastTransitionTime"] == written["lastHeartbeatTime"]
    assert [c["type"] for c in (fake_kube.node(NODE) or {})["status"]["conditions"]] == ["Ready", "GPUHealthy"]
    [write] = fake_kube.writes("nodes")
    assert (write.subresource, write.params.get("fieldManager"), write.content_type) == (
        "status", "remediator", "application/strategic-merge-patch+json",
    )
    assert set(write.body) == {"metadata", "status"}
    assert write.body["status"] == {"conditions": [written]}


async def test_the_same_condition_again_writes_nothing(
    make_ctx: MakeCtx, fake_kube: FakeKube, node: dict[str, Any]
) -> None:
    await set_condition(make_ctx, **FALSE)
    again = await set_condition(make_ctx, **FALSE)
    assert not again.changed and "already says" in again.message
    assert len(status_writes(fake_kube)) == 1


async def test_transition_time_moves_only_when_the_status_does(
    make_ctx: MakeCtx, fake_kube: FakeKube, node: dict[str, Any]
) -> None:
    first_time = "2026-12-01T00:00:00Z"
    ours = {"type": "GPUHealthy", "status": "False", "reason": "Xid79", "message": "old",
            "lastHeartbeatTime": first_time, "lastTransitionTime": first_time}
    conditions = [*(fake_kube.node(NODE) or {})["status"]["conditions"], ours]
    fake_kube.write("nodes", None, NODE, {"status": {"conditions": conditions}})
    await set_condition(make_ctx, status="False", reason="Xid79", message="new words")
    assert (condition(fake_kube) or {})["lastTransitionTime"] == first_time
    assert (condition(fake_kube) or {})["message"] == "new words"
    await set_condition(make_ctx, status="True", reason="Recovered", message="")
    assert (condition(fake_kube) or {})["lastTransitionTime"] != first_time


async def test_revert_sets_true_recovered_and_leaves_other_conditions(
    make_ctx: MakeCtx, fake_kube: FakeKube, node: dict[str, Any]
) -> None:
    forward = await set_condition(make_ctx, **FALSE)
    ready_before = condition(fake_kube, "Ready")
    clear = ClearNodeCondition()
    result = await clear.run(make_ctx(prior_output=forward.output), clear.parse({"type": "GPUHealthy"}))
    assert result.changed
    cleared = condition(fake_kube) or {}
    assert (cleared["status"], cleared["reason"]) == ("True", "Recovered")
    assert "rem-1" in cleared["message"]
    assert condition(fake_kube, "Ready") == ready_before
    again = await clear.run(make_ctx(prior_output=forward.output), clear.parse({}))
    assert not again.changed
    assert len(status_writes(fake_kube)) == 2


async def test_revert_leaves_a_condition_someone_else_rewrote(
    make_ctx: MakeCtx, fake_kube: FakeKube, node: dict[str, Any]
) -> None:
    forward = await set_condition(make_ctx, **FALSE)
    theirs = {**(condition(fake_kube) or {}), "reason": "NPDGPUFault", "message": "node-problem-detector"}
    conditions = [c for c in (fake_kube.node(NODE) or {})["status"]["conditions"] if c["type"] != "GPUHealthy"]
    fake_kube.write("nodes", None, NODE, {"status": {"conditions": [*conditions, theirs]}})
    clear = ClearNodeCondition()
    result = await clear.run(make_ctx(prior_output=forward.output), clear.parse({}))
    assert not result.changed and "someone else" in result.message
    assert (condition(fake_kube) or {})["reason"] == "NPDGPUFault"


async def test_revert_puts_back_another_writer_s_fault(
    make_ctx: MakeCtx, fake_kube: FakeKube, node: dict[str, Any]
) -> None:
    theirs = {"type": "GPUHealthy", "status": "False", "reason": "NPDGPUFault", "message": "seen by NPD",
              "lastHeartbeatTime": "2026-12-01T00:00:00Z", "lastTransitionTime": "2026-12-01T00:00:00Z"}
    conditions = [*(fake_kube.node(NODE) or {})["status"]["conditions"], theirs]
    fake_kube.write("nodes", None, NODE, {"status": {"conditions": conditions}})
    forward = await set_condition(make_ctx, **FALSE)
    assert forward.output["previous"]["reason"] == "NPDGPUFault"
    clear = ClearNodeCondition()
    await clear.run(make_ctx(prior_output=forward.output), clear.parse({}))
    restored = condition(fake_kube) or {}
    assert (restored["status"], restored["reason"], restored["message"]) == ("False", "NPDGPUFault", "seen by NPD")


async def test_the_state_before_the_first_attempt_survives_a_crash(
    make_ctx: MakeCtx, fake_kube: FakeKube, node: dict[str, Any]
) -> None:
    checkpoints = Checkpoints()
    action = SetNodeCondition()
    await action.run(make_ctx(checkpoints=checkpoints), action.parse(FALSE))
    rerun = await action.run(make_ctx(progress=checkpoints.last), action.parse(FALSE))
    assert rerun.output["previous"] is None and not rerun.changed


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": False, "reason": "xid-79"}, "reason"),
        ({"status": False, "reason": "Xid 79"}, "reason"),
        ({"status": False, "reason": ""}, "reason"),
        ({"status": "Maybe", "reason": "Xid79"}, "status"),
        ({"status": True, "reason": "Recovered", "type": "gpu-healthy"}, "type"),
    ],
)
def test_bad_words_are_refused_before_any_request(params: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SetNodeCondition().parse(params)
    assert caught.value.errors()[0]["loc"] == (field,)


def test_yaml_booleans_and_long_messages() -> None:
    params = SetNodeCondition().parse({"status": True, "reason": "Recovered", "message": "x" * 5000})
    assert params.status == "True" and len(params.message) == 1024  # type: ignore[attr-defined]
    assert default_registry()["set_node_condition"].default_revert == "clear_node_condition"


async def test_dry_run_writes_nothing(make_ctx: MakeCtx, fake_kube: FakeKube, node: dict[str, Any]) -> None:
    action = SetNodeCondition()
    result = await action.run(make_ctx(dry_run=True), action.parse(FALSE))
    assert not result.changed and result.message.startswith("dry run: would set condition GPUHealthy=False")
    assert fake_kube.writes("nodes") == []

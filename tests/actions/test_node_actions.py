"""cordon/uncordon, taint/untaint, label/unlabel, annotate/unannotate against the fake apiserver over HTTP."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from remediator.actions.node import (
    REMEDIATION_ANNOTATION,
    STATE_LABEL,
    Annotate,
    Cordon,
    Label,
    Taint,
    Unannotate,
    Uncordon,
    Unlabel,
    Untaint,
)
from remediator.errors import Invalid, NotSupported
from tests.actions.conftest import NODE, Checkpoints, MakeCtx
from tests.fakekube import FakeKube

FOREIGN = {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}


def node_of(fake: FakeKube) -> dict[str, Any]:
    found = fake.node(NODE)
    assert found is not None
    return found


def taints(fake: FakeKube) -> list[dict[str, Any]]:
    return list(node_of(fake)["spec"].get("taints") or [])


# ------------------------------------------------------------------------------------------ cordon


async def test_cordon_marks_the_node_and_records_it_was_schedulable(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    result = await Cordon().run(make_ctx(), Cordon().parse({}))
    fresh = node_of(fake_kube)
    assert result.changed
    assert result.output["was_unschedulable"] is False
    assert fresh["spec"]["unschedulable"] is True
    assert fresh["metadata"]["labels"][STATE_LABEL] == "quarantined"
    assert fresh["metadata"]["annotations"][REMEDIATION_ANNOTATION] == "rem-1"
    assert all(c.params.get("fieldManager") == "remediator" for c in fake_kube.writes("nodes"))


async def test_cordon_twice_changes_the_node_once(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    first = await Cordon().run(ctx, Cordon().parse({}))
    second = await Cordon().run(ctx, Cordon().parse({}))
    assert (first.changed, second.changed) == (True, False)
    assert len(fake_kube.writes("nodes")) == 1
    assert second.output == first.output


async def test_cordon_rerun_after_a_crash_still_remembers_the_node_was_schedulable(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    store = Checkpoints()
    await Cordon().run(make_ctx(checkpoints=store), Cordon().parse({}))
    rerun = await Cordon().run(make_ctx(progress=store.last), Cordon().parse({}))
    await Uncordon().run(make_ctx(prior_output=rerun.output), Uncordon().parse({}))
    assert rerun.output["was_unschedulable"] is False
    assert not node_of(fake_kube)["spec"].get("unschedulable")


async def test_revert_leaves_a_node_cordoned_before_the_remediation_cordoned(
    fake_kube: FakeKube, make_ctx: MakeCtx
) -> None:
    fake_kube.add_node(NODE, unschedulable=True)
    forward = await Cordon().run(make_ctx(), Cordon().parse({}))
    result = await Uncordon().run(make_ctx(prior_output=forward.output), Uncordon().parse({}))
    fresh = node_of(fake_kube)
    assert forward.output["was_unschedulable"] is True
    assert result.output["kept_cordoned"] is True
    assert fresh["spec"]["unschedulable"] is True
    assert REMEDIATION_ANNOTATION not in fresh["metadata"].get("annotations", {})


async def test_uncordon_restores_exactly_the_prior_node(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    before = node_of(fake_kube)
    forward = await Cordon().run(make_ctx(), Cordon().parse({}))
    await Uncordon().run(make_ctx(prior_output=forward.output), Uncordon().parse({}))
    after = node_of(fake_kube)
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")
    assert after["spec"] == before["spec"]


async def test_marks_someone_else_set_survive_the_revert(fake_kube: FakeKube, make_ctx: MakeCtx) -> None:
    fake_kube.add_node(NODE, annotations={REMEDIATION_ANNOTATION: "rem-0"}, labels={STATE_LABEL: "draining"})
    forward = await Cordon().run(make_ctx(), Cordon().parse({}))
    await Uncordon().run(make_ctx(prior_output=forward.output), Uncordon().parse({}))
    meta = node_of(fake_kube)["metadata"]
    assert meta["annotations"][REMEDIATION_ANNOTATION] == "rem-0"
    assert meta["labels"][STATE_LABEL] == "draining"


async def test_dry_run_cordon_only_reads(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    result = await Cordon().run(make_ctx(dry_run=True), Cordon().parse({}))
    assert result.changed is False
    assert "would cordon" in result.message
    assert fake_kube.writes() == []


async def test_dry_run_without_a_cluster_says_what_it_would_do(make_ctx: MakeCtx) -> None:
    result = await Cordon().run(make_ctx(dry_run=True, without_kube=True), Cordon().parse({}))
    assert not result.changed
    assert NODE in result.message


async def test_without_a_cluster_a_real_run_refuses(make_ctx: MakeCtx) -> None:
    with pytest.raises(NotSupported):
        await Cordon().run(make_ctx(without_kube=True), Cordon().parse({}))


# ------------------------------------------------------------------------------------------ taints


async def test_taint_keeps_foreign_taints(fake_kube: FakeKube, make_ctx: MakeCtx) -> None:
    fake_kube.add_node(NODE, taints=[FOREIGN])
    result = await Taint().run(make_ctx(), Taint().parse({"value": "xid-79"}))
    assert result.changed
    assert FOREIGN in taints(fake_kube)
    assert {"key": "remediator.io/gpu-unhealthy", "value": "xid-79", "effect": "NoSchedule"} in taints(
        fake_kube
    )


async def test_taint_twice_changes_the_node_once(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    results = [await Taint().run(ctx, Taint().parse({"value": "xid-79"})) for _ in range(2)]
    assert [r.changed for r in results] == [True, False]
    assert len(fake_kube.writes("nodes")) == 1
    assert len(taints(fake_kube)) == 1


async def test_taint_retries_on_conflict_and_keeps_the_concurrent_change(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.before(
        "patch", "nodes", lambda call: fake_kube.write("nodes", None, NODE, {"spec": {"taints": [FOREIGN]}})
    )
    result = await Taint().run(make_ctx(), Taint().parse({"value": "xid-48", "effect": "NoExecute"}))
    statuses = [c.status for c in fake_kube.requests("patch", "nodes")]
    assert statuses == [409, 200]
    assert result.changed
    assert FOREIGN in taints(fake_kube)
    assert {"key": "remediator.io/gpu-unhealthy", "value": "xid-48", "effect": "NoExecute"} in taints(
        fake_kube
    )


async def test_untaint_removes_only_our_taint(fake_kube: FakeKube, make_ctx: MakeCtx) -> None:
    fake_kube.add_node(NODE, taints=[FOREIGN])
    forward = await Taint().run(make_ctx(), Taint().parse({"value": "xid-79"}))
    await Untaint().run(make_ctx(prior_output=forward.output), Untaint().parse({}))
    assert taints(fake_kube) == [FOREIGN]
    assert REMEDIATION_ANNOTATION not in node_of(fake_kube)["metadata"].get("annotations", {})


async def test_untaint_restores_a_pre_existing_taint_value(fake_kube: FakeKube, make_ctx: MakeCtx) -> None:
    earlier = {"key": "remediator.io/gpu-unhealthy", "value": "xid-31", "effect": "NoSchedule"}
    fake_kube.add_node(NODE, taints=[earlier, FOREIGN])
    forward = await Taint().run(make_ctx(), Taint().parse({"value": "xid-79"}))
    await Untaint().run(make_ctx(prior_output=forward.output), Untaint().parse({}))
    assert forward.output["previous"] == {"value": "xid-31"}
    assert taints(fake_kube) == [earlier, FOREIGN]


async def test_taint_observed_before_its_step_began_needs_no_checkpoint_and_is_restored(
    fake_kube: FakeKube, make_ctx: MakeCtx
) -> None:
    """The prior taint observed before the step row began (stored with it) is what the undo restores, and the
    apply writes no checkpoint of its own (`Action.observe`)."""
    earlier = {"key": "remediator.io/gpu-unhealthy", "value": "xid-31", "effect": "NoSchedule"}
    fake_kube.add_node(NODE, taints=[earlier, FOREIGN])
    params = Taint().parse({"value": "xid-79"})
    observed = await Taint().observe(make_ctx(), params)
    assert observed == {"prior": {"previous": {"value": "xid-31"}, "marked": True}}
    assert fake_kube.writes("nodes") == []  # observing writes nothing
    store = Checkpoints()
    forward = await Taint().run(make_ctx(progress=observed, checkpoints=store), params)
    assert store.saved == []
    assert forward.output["previous"] == {"value": "xid-31"}
    await Untaint().run(make_ctx(prior_output=forward.output), Untaint().parse({}))
    assert taints(fake_kube) == [earlier, FOREIGN]


async def test_taint_builds_on_the_node_it_observed_and_keeps_a_change_made_since(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    """`apply` patches from the node `observe` read (no second read); the patch's resourceVersion turns a
    change made in between into a 409, after which it reads afresh and the other writer's taint stays."""
    params = Taint().parse({"value": "xid-79"})
    ctx = make_ctx()
    ctx.progress = await Taint().observe(ctx, params) or {}
    assert ctx.observed is not None
    fake_kube.write("nodes", None, NODE, {"spec": {"taints": [FOREIGN]}})  # another writer, after the read
    reads_before = len(fake_kube.requests("get", "nodes"))
    result = await Taint().run(ctx, params)
    assert [c.status for c in fake_kube.requests("patch", "nodes")] == [409, 200]
    assert len(fake_kube.requests("get", "nodes")) == reads_before + 1  # only the read after the conflict
    assert result.changed and ctx.observed is None
    assert FOREIGN in taints(fake_kube)
    assert {"key": "remediator.io/gpu-unhealthy", "value": "xid-79", "effect": "NoSchedule"} in taints(fake_kube)


async def test_observe_takes_the_node_the_context_read_instead_of_reading_it_again(
    fake_kube: FakeKube, make_ctx: MakeCtx
) -> None:
    """A first step prepared with its admission hands observe the node object its context read a moment
    before (`ctx.node_read`, engine/step_lifecycle.py): no request; taint then patches from it, guarded."""
    earlier = {"key": "remediator.io/gpu-unhealthy", "value": "xid-31", "effect": "NoSchedule"}
    fake_kube.add_node(NODE, taints=[earlier])
    ctx = make_ctx()
    assert ctx.kube is not None
    ctx.node_read = await ctx.kube.get_node(NODE)
    reads_before = len(fake_kube.requests("get", "nodes"))
    params = Taint().parse({"value": "xid-79"})
    assert await Taint().observe(ctx, params) == {"prior": {"previous": {"value": "xid-31"}, "marked": True}}
    assert await Cordon().observe(ctx, Cordon().parse({})) == {"prior": {"was_unschedulable": False, "marked": True}}
    assert len(fake_kube.requests("get", "nodes")) == reads_before
    assert ctx.observed is ctx.node_read
    await Taint().run(ctx, params)
    assert len(fake_kube.requests("get", "nodes")) == reads_before
    assert [c.body["metadata"]["resourceVersion"] for c in fake_kube.requests("patch", "nodes")] == [
        ctx.node_read["metadata"]["resourceVersion"]
    ]


async def test_cordon_observed_before_its_step_began_needs_no_checkpoint(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    observed = await Cordon().observe(make_ctx(), Cordon().parse({}))
    assert observed == {"prior": {"was_unschedulable": False, "marked": True}}
    store = Checkpoints()
    forward = await Cordon().run(make_ctx(progress=observed, checkpoints=store), Cordon().parse({}))
    assert store.saved == [] and forward.changed
    await Uncordon().run(make_ctx(prior_output=forward.output), Uncordon().parse({}))
    assert not node_of(fake_kube)["spec"].get("unschedulable")


async def test_untaint_leaves_a_taint_someone_rewrote_since(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    forward = await Taint().run(make_ctx(), Taint().parse({"value": "xid-79"}))
    rewritten = {"key": "remediator.io/gpu-unhealthy", "value": "operator", "effect": "NoSchedule"}
    fake_kube.write("nodes", None, NODE, {"spec": {"taints": [rewritten]}})
    await Untaint().run(make_ctx(prior_output=forward.output), Untaint().parse({}))
    assert taints(fake_kube) == [rewritten]


@pytest.mark.parametrize("value", ["Xid 79 on GPU-1234 (fell off the bus)", "x" * 64, "-79", "ok/not"])
async def test_alert_text_never_becomes_an_invalid_taint(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx, value: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match="taint value"):
        Taint().parse({"value": value})
    unchecked = Taint.Params.model_construct(
        key="remediator.io/gpu-unhealthy", value=value, effect="NoSchedule"
    )
    with pytest.raises(Invalid) as caught:
        await Taint().run(make_ctx(), unchecked)
    assert value in str(caught.value)
    assert fake_kube.calls == []


async def test_invalid_taint_key_is_refused(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    unchecked = Taint.Params.model_construct(key="GPU Unhealthy", value="", effect="NoSchedule")
    with pytest.raises(Invalid, match="GPU Unhealthy"):
        await Taint().run(make_ctx(), unchecked)
    assert fake_kube.calls == []


def test_taint_effect_is_limited_to_the_three_kubernetes_effects() -> None:
    with pytest.raises(pydantic.ValidationError):
        Taint().parse({"effect": "NoExecuteNow"})


# ------------------------------------------------------------------------------------------ labels


async def test_label_records_and_unlabel_restores_the_previous_value(
    fake_kube: FakeKube, make_ctx: MakeCtx
) -> None:
    fake_kube.add_node(NODE, labels={"gpu-health": "ok", "team": "ml"})
    forward = await Label().run(make_ctx(), Label().parse({"key": "gpu-health", "value": "degraded"}))
    assert node_of(fake_kube)["metadata"]["labels"]["gpu-health"] == "degraded"
    await Unlabel().run(make_ctx(prior_output=forward.output), Unlabel().parse({}))
    labels = node_of(fake_kube)["metadata"]["labels"]
    assert forward.output["previous"] == "ok"
    assert labels["gpu-health"] == "ok"
    assert labels["team"] == "ml"


async def test_unlabel_removes_a_label_that_was_absent_before(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    forward = await Label().run(make_ctx(), Label().parse({"key": "gpu-health", "value": "degraded"}))
    await Unlabel().run(make_ctx(prior_output=forward.output), Unlabel().parse({}))
    assert "gpu-health" not in node_of(fake_kube)["metadata"]["labels"]


async def test_label_twice_changes_once(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    results = [await Label().run(ctx, Label().parse({"key": "k", "value": "v"})) for _ in range(2)]
    assert [r.changed for r in results] == [True, False]
    assert results[1].output["previous"] is None
    assert len(fake_kube.writes("nodes")) == 1


async def test_invalid_label_value_is_refused_before_any_request(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    with pytest.raises(pydantic.ValidationError):
        Label().parse({"key": "gpu-health", "value": "Xid 79: GPU has fallen off the bus"})
    unchecked = Label.Params.model_construct(key="gpu-health", value="a" * 64)
    with pytest.raises(Invalid, match="label value"):
        await Label().run(make_ctx(), unchecked)
    assert fake_kube.calls == []


# ------------------------------------------------------------------------------------------ annotations


async def test_annotate_and_unannotate_restore_exactly(fake_kube: FakeKube, make_ctx: MakeCtx) -> None:
    fake_kube.add_node(NODE, annotations={"note": "before", "other": "x"})
    forward = await Annotate().run(
        make_ctx(), Annotate().parse({"key": "note", "value": "Xid 79: any text here"})
    )
    assert node_of(fake_kube)["metadata"]["annotations"]["note"] == "Xid 79: any text here"
    await Unannotate().run(make_ctx(prior_output=forward.output), Unannotate().parse({}))
    assert node_of(fake_kube)["metadata"]["annotations"] == {"note": "before", "other": "x"}


async def test_unannotate_without_a_key_or_prior_output_is_invalid(node: dict, make_ctx: MakeCtx) -> None:
    with pytest.raises(Invalid):
        await Unannotate().run(make_ctx(), Unannotate().parse({}))


async def test_a_node_that_keeps_changing_fails_the_step_once_without_nested_retries(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    """Every patch loses the race: the conflict retries stop after CONFLICT_ATTEMPTS, as a permanent failure,
    so the step's own retries of temporary errors do not multiply them."""
    from remediator.engine.executor import run_with_retries
    from remediator.errors import StepFailed
    from remediator.retrying import CONFLICT_ATTEMPTS

    fake_kube.before(
        "patch", "nodes", lambda call: fake_kube.write("nodes", None, NODE, {"metadata": {"labels": {"x": "y"}}}),
        times=1000,
    )
    taint = Taint()
    with pytest.raises(StepFailed, match="kept changing under us"):
        await run_with_retries(taint, make_ctx(), taint.parse({"value": "xid-48"}), timeout=30)
    assert [c.status for c in fake_kube.requests("patch", "nodes")] == [409] * CONFLICT_ATTEMPTS

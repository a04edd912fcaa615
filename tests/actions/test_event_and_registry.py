"""The `event` action (node and pod events, posted once per step) and the default action registry."""

from __future__ import annotations

from remediator.actions.kube_event import RecordKubeEvent
from remediator.actions.registry import default_registry
from tests.actions.conftest import NODE, MakeCtx
from tests.fakekube import FakeKube


async def test_node_event_lands_in_default_with_the_node_uid(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    params = RecordKubeEvent().parse({"reason": "GPUXidError", "message": "Xid 79 on GPU-1"})
    result = await RecordKubeEvent().run(make_ctx(), params)
    events = fake_kube.items("events")
    assert result.changed
    (event,) = events
    assert event["metadata"]["namespace"] == "default"
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": NODE,
        "uid": node["metadata"]["uid"],
    }
    assert (event["type"], event["reason"], event["reportingComponent"]) == (
        "Warning",
        "GPUXidError",
        "remediator",
    )


async def test_event_rerun_posts_no_second_event(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    params = RecordKubeEvent().parse({"reason": "Quarantined", "message": "m", "type": "Normal"})
    ctx = make_ctx()
    first = await RecordKubeEvent().run(ctx, params)
    second = await RecordKubeEvent().run(ctx, params)
    assert (first.changed, second.changed) == (True, False)
    assert len(fake_kube.items("events")) == 1


async def test_pod_events_go_to_each_pods_namespace(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.add_namespace("ml")
    a = fake_kube.add_pod("a", "ml", node=NODE, gpus=1)
    b = fake_kube.add_pod("b", node=NODE, gpus=1)
    pods = [
        {"namespace": p["metadata"]["namespace"], "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
        for p in (a, b)
    ]
    params = RecordKubeEvent().parse({"reason": "GPUFailing", "message": "your GPU is failing", "object": "pods"})
    result = await RecordKubeEvent().run(make_ctx(context={"pods": pods}), params)
    events = fake_kube.items("events")
    assert sorted((e["metadata"]["namespace"], e["involvedObject"]["name"]) for e in events) == [
        ("default", "b"),
        ("ml", "a"),
    ]
    assert result.output["objects"] == ["Pod/a", "Pod/b"]


async def test_dry_run_event_posts_nothing(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    action = RecordKubeEvent()
    result = await action.run(make_ctx(dry_run=True), action.parse({"reason": "R", "message": "m"}))
    assert not result.changed
    assert fake_kube.writes() == []


def test_event_is_not_mutating() -> None:
    assert RecordKubeEvent.mutating is False


def test_registry_holds_the_kubernetes_actions_by_name() -> None:
    registry = default_registry()
    mine = {
        "cordon",
        "uncordon",
        "taint",
        "untaint",
        "label",
        "unlabel",
        "annotate",
        "unannotate",
        "drain",
        "event",
    }
    assert mine <= set(registry)
    assert all(name == action.name for name, action in registry.items())
    assert {n for n in mine if registry[n].quarantines} == {"cordon", "taint", "drain"}
    assert {n: registry[n].default_revert for n in ("cordon", "taint", "label", "annotate", "drain")} == {
        "cordon": "uncordon",
        "taint": "untaint",
        "label": "unlabel",
        "annotate": "unannotate",
        "drain": "uncordon",
    }


def test_every_default_undo_exists_and_every_quarantine_can_say_it_still_holds() -> None:
    """What the engine relies on instead of knowing actions: an undo it can look up, and `still_holds` on
    every action that puts a node under quarantine (else a lifted quarantine would count forever)."""
    from remediator.actions.base import Action

    registry = default_registry()
    for name, action in registry.items():
        if action.default_revert is not None:
            assert action.default_revert in registry, name
        if action.quarantines:
            assert type(action).still_holds is not Action.still_holds, f"{name} quarantines but cannot say so"

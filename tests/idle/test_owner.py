"""annotate_pods (exact revert) and notify_owner (owner from annotation, labels, default) over the fake."""

from __future__ import annotations

from typing import Any

import pytest

from remediator.actions.owner import AnnotatePods, NotifyOwner, UnannotatePods
from remediator.adapters.notifier import Message
from tests.idle.conftest import MakeCtx, idle_deployment
from tests.idle.fakescale import ScalingFakeKube

NS = "research"
KEY = "remediator.io/idle-gpu"


class Outbox:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    async def send(self, message: Message) -> None:
        self.sent.append(message)


def pod_annotations(fake: ScalingFakeKube, pod: str) -> dict[str, str]:
    obj = fake.pod(NS, pod)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


async def test_annotate_and_revert_restore_exactly(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    pods = idle_deployment(fake_kube, NS, replicas=1)
    fake_kube.write("pods", NS, pods[0], {"metadata": {"annotations": {"team.example/note": "keep me"}}})
    before = pod_annotations(fake_kube, pods[0])
    action = AnnotatePods()

    result = await action.run(await make_ctx(pods[0], NS), action.parse({"value": "idle since 10:00"}))

    assert pod_annotations(fake_kube, pods[0]) == {**before, KEY: "idle since 10:00"}
    undo = UnannotatePods()
    ctx = await make_ctx(pods[0], NS, prior_output=result.output)
    await undo.run(ctx, undo.parse({}))
    assert pod_annotations(fake_kube, pods[0]) == before


async def test_annotation_revert_puts_back_a_previous_value(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    pods = idle_deployment(fake_kube, NS, replicas=1)
    fake_kube.write("pods", NS, pods[0], {"metadata": {"annotations": {KEY: "older"}}})
    action, undo = AnnotatePods(), UnannotatePods()
    result = await action.run(await make_ctx(pods[0], NS), action.parse({"value": "new"}))
    await undo.run(await make_ctx(pods[0], NS, prior_output=result.output), undo.parse({}))
    assert pod_annotations(fake_kube, pods[0])[KEY] == "older"


@pytest.mark.parametrize(
    ("annotations_", "labels", "default", "expected"),
    [
        ({"remediator.io/owner": "#ml-research"}, {"team": "ml"}, "#gpu-idle", ("#ml-research", "annotation")),
        ({}, {"team": "ml"}, "#gpu-idle", ("#ml", "label team")),
        ({}, {"owner": "alice"}, "#gpu-idle", ("@alice", "label owner")),
        ({}, {}, "#gpu-idle", ("#gpu-idle", "default channel")),
        ({}, {}, None, (None, "notifier channels")),
    ],
)
async def test_owner_comes_from_annotation_then_labels_then_default(
    fake_kube: ScalingFakeKube,
    make_ctx: MakeCtx,
    annotations_: dict[str, str],
    labels: dict[str, str],
    default: str | None,
    expected: tuple[str | None, str],
) -> None:
    pods = idle_deployment(fake_kube, NS, replicas=1, gpus=2)
    fake_kube.write("namespaces", None, NS, {"metadata": {"annotations": annotations_, "labels": labels}})
    outbox = Outbox()
    ctx = await make_ctx(pods[0], NS)
    ctx.notifier = outbox
    action = NotifyOwner()

    result = await action.run(ctx, action.parse({"default_channel": default or ""}))

    assert (result.output["owner"], result.output["owner_source"].split(" ")[0]) == (
        expected[0],
        expected[1].split(" ")[0],
    )
    [message] = outbox.sent
    assert message.channel == expected[0]
    assert [(p.namespace, p.name, p.owner) for p in message.pods] == [
        (NS, pods[0], "ReplicaSet/notebook-5d8f → Deployment/notebook")
    ]
    assert "GPU-hours" in message.text and result.output["gpus_held"] == 2
    assert result.output["gpu_hours_idle"] > 0
    assert not fake_kube.writes()


async def test_notify_owner_without_notifier_changes_nothing(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    pods = idle_deployment(fake_kube, NS, replicas=1)
    action = NotifyOwner()
    result: Any = await action.run(await make_ctx(pods[0], NS), action.parse({}))
    assert result.output["sent"] is False and not result.changed

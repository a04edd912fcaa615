"""scale_workload / restore_workload against the strict fake apiserver (with the scale subresource)."""

from __future__ import annotations

from typing import Any

import pytest

from remediator.actions.workload import RestoreWorkload, ScaleWorkload
from remediator.errors import StepFailed
from tests.idle.conftest import GPU_UUID, NODE, Checkpoints, MakeCtx, gpu_template, idle_deployment
from tests.idle.fakescale import ScalingFakeKube

NS = "research"


async def scale(make_ctx: MakeCtx, pod: str | None, replicas: int = 0, **kw: Any) -> Any:
    action = ScaleWorkload()
    return await action.run(await make_ctx(pod, NS if pod else None, **kw), action.parse({"replicas": replicas}))


async def restore(make_ctx: MakeCtx, output: dict[str, Any]) -> Any:
    action = RestoreWorkload()
    return await action.run(await make_ctx(None, None, context={}, prior_output=output), action.parse({}))


def replicas(fake: ScalingFakeKube, plural: str, name: str) -> int:
    obj = fake.get(plural, NS, name)
    assert obj is not None
    return int(obj["spec"]["replicas"])


async def test_deployment_scaled_to_zero_through_scale_and_restored(
    fake_kube: ScalingFakeKube, make_ctx: MakeCtx
) -> None:
    pods = idle_deployment(fake_kube, NS, "notebook", replicas=3, gpus=2)

    result = await scale(make_ctx, pods[0])

    assert result.changed
    assert replicas(fake_kube, "deployments", "notebook") == 0
    [patch] = fake_kube.requests("patch", "deployments")
    assert patch.subresource == "scale" and patch.ok
    [workload] = result.output["workloads"]
    assert (workload["kind"], workload["name"], workload["previous"], workload["set"]) == (
        "Deployment",
        "notebook",
        3,
        0,
    )
    assert result.output["freed"] == {"nvidia.com/gpu": 6} and result.output["gpus_freed"] == 6
    assert result.output["namespace"] == NS

    undone = await restore(make_ctx, result.output)
    assert undone.changed and undone.output["workloads"][0]["outcome"] == "restored"
    assert replicas(fake_kube, "deployments", "notebook") == 3


async def test_rerun_keeps_the_first_observation(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    pods = idle_deployment(fake_kube, NS, "notebook", replicas=2, gpus=1)
    checkpoints = Checkpoints()
    await scale(make_ctx, pods[0], checkpoints=checkpoints)
    again = await scale(make_ctx, pods[0], progress=checkpoints.last, checkpoints=checkpoints)

    assert not again.changed
    assert again.output["workloads"][0]["previous"] == 2
    assert len(fake_kube.requests("patch", "deployments")) == 1
    await restore(make_ctx, again.output)
    assert replicas(fake_kube, "deployments", "notebook") == 2


async def test_statefulset_scaled_and_restored(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    fake_kube.add_namespace(NS)
    fake_kube.add_node(NODE)
    sts = fake_kube.add_statefulset("trainer", NS, replicas=2)
    gpu_template(fake_kube, "statefulsets", NS, "trainer", 4)
    fake_kube.add_pod("trainer-0", NS, node=NODE, gpus=4, owner=sts)
    fake_kube.add_pod("trainer-1", NS, node=NODE, gpus=4, owner=sts)

    result = await scale(make_ctx, "trainer-1", replicas=1)

    assert replicas(fake_kube, "statefulsets", "trainer") == 1
    assert result.output["freed"] == {"nvidia.com/gpu": 4}
    [patch] = fake_kube.requests("patch", "statefulsets")
    assert patch.subresource == "scale"
    await restore(make_ctx, result.output)
    assert replicas(fake_kube, "statefulsets", "trainer") == 2


async def test_job_suspended_and_resumed(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    fake_kube.add_namespace(NS)
    fake_kube.add_node(NODE)
    job = fake_kube.add_job("sweep-17", NS)
    fake_kube.add_pod("sweep-17-abcde", NS, node=NODE, gpus=1, owner=job)

    result = await scale(make_ctx, "sweep-17-abcde")

    stored = fake_kube.get("jobs", NS, "sweep-17")
    assert stored is not None and stored["spec"]["suspend"] is True
    [workload] = result.output["workloads"]
    assert (workload["kind"], workload["previous"], workload["changed"]) == ("Job", False, True)
    assert result.output["freed"] == {"nvidia.com/gpu": 1}

    await restore(make_ctx, result.output)
    stored = fake_kube.get("jobs", NS, "sweep-17")
    assert stored is not None and stored["spec"]["suspend"] is False


@pytest.mark.parametrize(
    "labels",
    [
        {"Hostname": NODE},  # dcgm-exporter without pod mapping
        {"Hostname": NODE, "pod": "nvidia-dcgm-exporter-x2k9d", "namespace": "gpu-operator"},  # its own pod
    ],
)
async def test_pods_found_through_the_sidecar_when_the_alert_names_no_workload_pod(
    fake_kube: ScalingFakeKube, make_ctx: MakeCtx, kube_adapter: Any, labels: dict[str, str]
) -> None:
    pods = idle_deployment(fake_kube, NS, "notebook", replicas=2, gpus=1)
    idle_deployment(fake_kube, "other", "busy", replicas=1, gpus=1)
    exporter = fake_kube.add_daemonset("nvidia-dcgm-exporter", "gpu-operator")
    fake_kube.add_pod("nvidia-dcgm-exporter-x2k9d", "gpu-operator", node=NODE, owner=exporter)
    pod = fake_kube.pod(NS, pods[1])
    assert pod is not None
    from remediator.actions.base import Target
    from remediator.actions.context import gather_context
    from remediator.settings import Settings

    target = Target(kind="gpu", node=NODE, gpu_index="0", namespace=labels.get("namespace"), pod=labels.get("pod"))
    context = await gather_context(kube_adapter, target, labels, Settings())
    # what the executor adds from the node sidecar (an index-only alert resolved to its UUID)
    context["gpu_uuid"] = GPU_UUID
    context["gpu_pods"] = {GPU_UUID: [{"namespace": NS, "name": pods[1], "uid": pod["metadata"]["uid"]}]}
    context["pod_source"] = "sidecar"

    result = await scale(make_ctx, None, context=context)

    assert [w["name"] for w in result.output["workloads"]] == ["notebook"]
    assert replicas(fake_kube, "deployments", "notebook") == 0
    busy = fake_kube.get("deployments", "other", "busy")
    assert busy is not None and busy["spec"]["replicas"] == 1
    assert not fake_kube.requests("patch", "daemonsets")


async def test_nothing_known_or_nothing_scalable_fails_the_step(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    fake_kube.add_namespace(NS)
    fake_kube.add_node(NODE)
    fake_kube.add_pod("bare", NS, node=NODE, gpus=1)
    with pytest.raises(StepFailed, match="a bare pod"):
        await scale(make_ctx, "bare")
    with pytest.raises(StepFailed, match="nothing to scale"):
        await scale(make_ctx, None, context={"pods": []})
    assert not fake_kube.writes()


async def test_restore_leaves_a_workload_someone_rescaled(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    pods = idle_deployment(fake_kube, NS, "notebook", replicas=2, gpus=1)
    result = await scale(make_ctx, pods[0])
    fake_kube.write("deployments", NS, "notebook", {"spec": {"replicas": 5}})

    undone = await restore(make_ctx, result.output)

    assert not undone.changed
    assert undone.output["workloads"][0]["outcome"].startswith("left")
    assert replicas(fake_kube, "deployments", "notebook") == 5


async def test_scale_subresource_is_strict(fake_kube: ScalingFakeKube, kube_adapter: Any) -> None:
    from remediator.errors import Conflict, Invalid, NotFound, NotSupported

    idle_deployment(fake_kube, NS, "notebook", replicas=2, gpus=1)
    scale_obj = await kube_adapter.get_scale("Deployment", NS, "notebook")
    assert scale_obj["kind"] == "Scale" and scale_obj["spec"]["replicas"] == 2
    with pytest.raises(Conflict):
        await kube_adapter.patch_scale("Deployment", NS, "notebook", 1, resource_version="1")
    with pytest.raises(Invalid):
        await kube_adapter.patch_scale("Deployment", NS, "notebook", -1)
    with pytest.raises(NotFound):
        await kube_adapter.get_scale("StatefulSet", NS, "notebook")
    with pytest.raises(NotSupported):
        await kube_adapter.get_scale("DaemonSet", NS, "notebook")
    assert replicas(fake_kube, "deployments", "notebook") == 2

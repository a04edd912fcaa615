"""Fixtures for the idle-GPU tests: the fake apiserver with the `scale` subresource, a GPU workload scene,
action contexts over it, and the engine's `make_cluster` over the same fake."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from remediator.actions.base import ActionContext, Target
from remediator.actions.context import gather_context
from remediator.adapters.kube import KubeAdapter
from remediator.settings import Settings
from tests.engine.conftest import make_cluster  # noqa: F401  (the engine's cluster fixture, over this fake)
from tests.fakekube.server import FakeKube
from tests.idle.fakescale import ScalingFakeKube

NODE = "gpu-node-1"
GPU_UUID = "GPU-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c05"


@pytest.fixture
async def fake_kube() -> AsyncIterator[ScalingFakeKube]:
    """The strict fake apiserver, serving the scale subresource too."""
    fake = ScalingFakeKube()
    async with fake:
        yield fake
        internal = fake.internal_errors()
    assert not internal, f"the fake apiserver failed internally: {internal!r}"


@dataclass
class Checkpoints:
    saved: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, progress: dict[str, Any]) -> None:
        self.saved.append(copy.deepcopy(progress))

    @property
    def last(self) -> dict[str, Any]:
        return copy.deepcopy(self.saved[-1]) if self.saved else {}


def gpu_template(fake: FakeKube, plural: str, namespace: str, name: str, gpus: int) -> None:
    """Give a workload's pod template a GPU request, as a real GPU workload has."""
    resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    obj = fake.get(plural, namespace, name)
    assert obj is not None
    containers = copy.deepcopy(obj["spec"]["template"]["spec"]["containers"])
    containers[0]["resources"] = resources
    fake.write(plural, namespace, name, {"spec": {"template": {"spec": {"containers": containers}}}})


def idle_deployment(
    fake: FakeKube, namespace: str = "research", name: str = "notebook", replicas: int = 2, gpus: int = 2
) -> list[str]:
    """A Deployment -> ReplicaSet -> pods on NODE, each pod holding `gpus` GPUs; returns the pod names."""
    fake.add_namespace(namespace)
    if fake.node(NODE) is None:
        fake.add_node(NODE)
    deployment = fake.add_deployment(name, namespace, replicas=replicas)
    gpu_template(fake, "deployments", namespace, name, gpus)
    rs = fake.add_replicaset(f"{name}-5d8f", namespace, replicas=replicas, deployment=deployment)
    pods = [f"{name}-5d8f-{i}" for i in range(replicas)]
    for pod in pods:
        fake.add_pod(pod, namespace, node=NODE, gpus=gpus, owner=rs)
    return pods


def idle_labels(pod: str, namespace: str, **extra: str) -> dict[str, str]:
    """A GPUIdle alert as dcgm-exporter labels it when scraped without honor_labels."""
    return {
        "alertname": "GPUIdle",
        "Hostname": NODE,
        "UUID": GPU_UUID,
        "gpu": "0",
        "modelName": "NVIDIA H200",
        "pod": "nvidia-dcgm-exporter-x2k9d",
        "namespace": "gpu-operator",
        "exported_pod": pod,
        "exported_namespace": namespace,
        **extra,
    }


MakeCtx = Callable[..., Any]


@pytest.fixture
def settings() -> Settings:
    return Settings(kube_qps=1000.0)


@pytest.fixture
def make_ctx(kube_adapter: KubeAdapter, settings: Settings) -> MakeCtx:
    """An ActionContext for an idle alert on `pod`, with the context the engine would gather."""

    async def make(
        pod: str | None,
        namespace: str | None,
        *,
        prior_output: Mapping[str, Any] | None = None,
        progress: dict[str, Any] | None = None,
        checkpoints: Checkpoints | None = None,
        context: Mapping[str, Any] | None = None,
        dry_run: bool = False,
        resolved: Callable[[], bool] = lambda: False,
    ) -> ActionContext:
        target = Target(kind="gpu", node=NODE, gpu_uuid=GPU_UUID, gpu_index="0", namespace=namespace, pod=pod)
        labels = idle_labels(pod or "", namespace or "") if pod and namespace else {"Hostname": NODE}
        gathered = (
            dict(context) if context is not None else await gather_context(kube_adapter, target, labels, settings)
        )

        async def alert_resolved() -> bool:
            return resolved()

        return ActionContext(
            remediation_id="rem-idle-1",
            step_name="step",
            target=target,
            settings=settings,
            dry_run=dry_run,
            kube=kube_adapter,
            prior_output=prior_output,
            progress=dict(progress or {}),
            checkpoint=checkpoints if checkpoints is not None else Checkpoints(),
            alert={"labels": labels, "name": "GPUIdle"}, alert_starts_at="2020-01-01T00:00:00Z",
            gathered=gathered,
            alert_resolved=alert_resolved,
        )

    return make

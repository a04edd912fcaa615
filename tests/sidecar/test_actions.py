"""The GPU actions against a real sidecar subprocess over HTTP (fake NVML underneath)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from remediator.actions.base import ActionContext, Target
from remediator.actions.gpu import (
    CollectDiagnostics,
    GpuReset,
    PowerLimit,
    PowerLimitParams,
    RestorePowerLimit,
)
from remediator.adapters.sidecar import SidecarClient
from remediator.errors import Invalid, NotSupported, StepFailed
from remediator.settings import Settings
from tests.sidecar.conftest import TOKEN, FakePod, SidecarEnv
from tests.sidecar.fakenvml import gpu_uuid

POD_UID = "dddddddd-4444-4444-8444-000000000004"


class StubKube:
    """Only what node_internal_ip needs: get_node returning the Node as the apiserver sends it."""

    def __init__(self, ip: str) -> None:
        self.ip = ip
        self.asked: list[str] = []

    async def get_node(self, name: str) -> dict[str, Any]:
        self.asked.append(name)
        return {
            "status": {
                "addresses": [
                    {"type": "Hostname", "address": name},
                    {"type": "InternalIP", "address": self.ip},
                ]
            }
        }


@pytest.fixture
async def client(env: SidecarEnv) -> AsyncIterator[SidecarClient]:
    settings = Settings(sidecar_token=TOKEN, sidecar_port=env.sidecar.port)
    async with httpx.AsyncClient() as http:
        yield SidecarClient(settings, http, backoff_seconds=0)


def context(
    client: SidecarClient,
    *,
    uuid: str | None = None,
    index: str | None = None,
    dry_run: bool = False,
    kube: StubKube | None = None,
) -> ActionContext:
    return ActionContext(
        remediation_id="r1",
        step_name="step",
        target=Target(kind="gpu", node="gpu-node-1", gpu_uuid=uuid, gpu_index=index),
        settings=Settings(sidecar_token=TOKEN),
        dry_run=dry_run,
        kube=kube,  # type: ignore[arg-type]
        sidecar=client,
        gathered={} if kube else {"node": {"internal_ip": "127.0.0.1"}},
    )


async def test_power_limit_and_revert(env: SidecarEnv, client: SidecarClient) -> None:
    action = PowerLimit()
    params = action.parse({"percent_of_default": 60})
    result = await action.run(context(client, uuid=gpu_uuid(0)), params)
    assert result.changed is True
    assert (result.output["previous_watts"], result.output["new_watts"]) == (700.0, 420.0)
    assert env.nvml.get("gpu.0.power_limit") == "420000"
    assert PowerLimit.default_revert == "restore_power_limit"

    again = await action.run(context(client, uuid=gpu_uuid(0)), params)
    assert again.changed is False

    restored = await RestorePowerLimit().run(context(client, uuid=gpu_uuid(0)), RestorePowerLimit().parse({}))
    assert restored.changed is True
    assert restored.output["new_watts"] == 700.0
    assert env.nvml.get("gpu.0.power_limit") == "700000"


async def test_power_limit_clamps_to_the_minimum(env: SidecarEnv, client: SidecarClient) -> None:
    result = await PowerLimit().run(context(client, uuid=gpu_uuid(1)), PowerLimitParams(watts=100))
    assert result.output["clamped"] is True
    assert (result.output["requested_watts"], result.output["new_watts"]) == (100.0, 200.0)
    assert env.nvml.get("gpu.1.power_limit") == "200000"


async def test_power_limit_without_clamp_fails_naming_the_range(
    env: SidecarEnv, client: SidecarClient
) -> None:
    with pytest.raises(Invalid, match="200-700 W"):
        await PowerLimit().run(context(client, uuid=gpu_uuid(1)), PowerLimitParams(watts=100, clamp=False))
    assert env.nvml.calls("nvmlDeviceSetPowerManagementLimit") == 0


async def test_power_limit_dry_run_and_index_target(env: SidecarEnv, client: SidecarClient) -> None:
    result = await PowerLimit().run(context(client, index="1", dry_run=True), PowerLimitParams(watts=300))
    assert result.changed is False
    assert result.output["gpu_uuid"] == gpu_uuid(1)
    assert result.output["new_watts"] == 300.0
    assert env.nvml.get("gpu.1.power_limit") == "700000"


def test_power_limit_params_need_exactly_one() -> None:
    with pytest.raises(ValueError):
        PowerLimit().parse({})
    with pytest.raises(ValueError):
        PowerLimit().parse({"watts": 300, "percent_of_default": 50})
    with pytest.raises(ValueError):
        PowerLimit().parse({"watts": 300, "force": True})


async def test_node_ip_from_the_node_object(env: SidecarEnv, client: SidecarClient) -> None:
    kube = StubKube("127.0.0.1")
    result = await CollectDiagnostics().run(
        context(client, uuid=gpu_uuid(0), kube=kube), CollectDiagnostics().parse({})
    )
    assert kube.asked == ["gpu-node-1"]
    assert result.changed is False
    assert CollectDiagnostics.mutating is False
    assert result.output["gpu"]["uuid"] == gpu_uuid(0)
    assert result.output["driver_version"] == "580.159.04"
    assert result.output["pods"]["pods"] == []


async def test_gpu_reset_refuses_while_pods_hold_the_gpu(env: SidecarEnv, client: SidecarClient) -> None:
    env.set_pods([FakePod("ml", "trainer", POD_UID, {"main": [gpu_uuid(0)]})])
    env.add_process(0, 9001, f"0::/kubepods/pod{POD_UID}/{'f' * 64}\n")
    with pytest.raises(StepFailed) as caught:
        await GpuReset().run(context(client, uuid=gpu_uuid(0)), GpuReset().parse({}))
    assert "ml/trainer" in caught.value.message
    assert f"pid 9001 in pod {POD_UID}" in caught.value.message
    assert env.nvml.calls("nvmlDeviceRemoveGpu_v2") == 0


async def test_gpu_reset_refuses_on_processes_outside_pods(env: SidecarEnv, client: SidecarClient) -> None:
    env.add_process(1, 9002, "0::/system.slice/some-daemon.service\n")
    with pytest.raises(StepFailed, match="pid 9002"):
        await GpuReset().run(context(client, uuid=gpu_uuid(1)), GpuReset().parse({}))
    assert env.nvml.calls("nvmlDeviceRemoveGpu_v2") == 0


async def test_gpu_reset_success(env: SidecarEnv, client: SidecarClient) -> None:
    result = await GpuReset().run(context(client, uuid=gpu_uuid(1)), GpuReset().parse({}))
    assert result.changed is True
    assert result.output["post_check"]["healthy"] is True
    assert env.nvml.calls("nvmlDeviceRemoveGpu_v2") == 1


async def test_gpu_reset_unhealthy_afterwards_fails(env: SidecarEnv, client: SidecarClient) -> None:
    env.nvml.set("gpu.1.lost_after_reset", 1)
    with pytest.raises(StepFailed, match="not healthy"):
        await GpuReset().run(context(client, uuid=gpu_uuid(1)), GpuReset().parse({}))


async def test_without_sidecar_client_it_is_not_supported() -> None:
    ctx = ActionContext(
        remediation_id="r",
        step_name="s",
        target=Target(kind="gpu", node="n", gpu_uuid=gpu_uuid(0)),
        settings=Settings(),
        dry_run=False,
    )
    with pytest.raises(NotSupported):
        await GpuReset().run(ctx, GpuReset().parse({}))

"""reclaim_quota / restore_quota against the strict fake apiserver: exact restores, usage floors, idempotence."""

from __future__ import annotations

from typing import Any

import pytest

from remediator.actions.quota import ReclaimQuota, RestoreQuota
from remediator.errors import StepFailed
from tests.idle.conftest import Checkpoints, MakeCtx, idle_deployment
from tests.idle.fakescale import ScalingFakeKube

NS = "research"


def hard(fake: ScalingFakeKube, name: str = "gpus") -> dict[str, Any]:
    quota = fake.get("resourcequotas", NS, name)
    assert quota is not None
    return dict(quota["spec"]["hard"])


def quota(
    fake: ScalingFakeKube, values: dict[str, str], used: dict[str, str] | None = None, name: str = "gpus"
) -> None:
    fake.add_namespace(NS)
    fake.add_resource_quota(name, NS, values)
    if used is not None:
        fake.write("resourcequotas", NS, name, {"status": {"used": used}})


async def reclaim(make_ctx: MakeCtx, pod: str | None = None, **raw: Any) -> Any:
    action = ReclaimQuota()
    ctx = await make_ctx(pod, NS if pod else None, context={"pods": []} if pod is None else None)
    return await action.run(ctx, action.parse({"namespace": NS, **raw}))


async def restore(make_ctx: MakeCtx, output: dict[str, Any]) -> Any:
    action = RestoreQuota()
    ctx = await make_ctx(None, None, context={}, prior_output=output)
    return await action.run(ctx, action.parse({}))


async def test_lowered_by_n_and_restored_exactly(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    original = {"requests.nvidia.com/gpu": "8", "limits.nvidia.com/gpu": "8", "requests.cpu": "64", "pods": "50"}
    quota(fake_kube, original, used={"requests.nvidia.com/gpu": "2", "limits.nvidia.com/gpu": "2"})

    result = await reclaim(make_ctx, by=4)

    assert result.changed
    assert hard(fake_kube) == {**original, "requests.nvidia.com/gpu": "4", "limits.nvidia.com/gpu": "4"}
    assert result.output["lowered"] == {"nvidia.com/gpu": 4}

    undone = await restore(make_ctx, result.output)
    assert undone.changed
    assert hard(fake_kube) == original


async def test_mig_keys_lowered_by_what_was_freed_per_resource(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    original = {
        "requests.nvidia.com/gpu": "8",
        "requests.nvidia.com/mig-1g.10gb": "14",
        "limits.nvidia.com/mig-1g.10gb": "14",
    }
    quota(fake_kube, original, used={k: "0" for k in original})

    result = await reclaim(make_ctx, by={"nvidia.com/mig-1g.10gb": 4})

    assert hard(fake_kube) == {
        **original,
        "requests.nvidia.com/mig-1g.10gb": "10",
        "limits.nvidia.com/mig-1g.10gb": "10",
    }
    await restore(make_ctx, result.output)
    assert hard(fake_kube) == original


async def test_quota_without_gpu_key_gets_one_and_loses_it_on_restore(
    fake_kube: ScalingFakeKube, make_ctx: MakeCtx
) -> None:
    idle_deployment(fake_kube, NS, replicas=1, gpus=2)  # the namespace uses 2 GPUs now
    original = {"requests.cpu": "64", "requests.memory": "256Gi"}
    quota(fake_kube, original)

    by = await reclaim(make_ctx, by=2)
    assert not by.changed and hard(fake_kube) == original  # no GPU limit: nothing to lower by

    capped = await reclaim(make_ctx, to=2)
    assert capped.changed
    assert hard(fake_kube) == {**original, "requests.nvidia.com/gpu": "2"}

    await restore(make_ctx, capped.output)
    assert hard(fake_kube) == original
    assert "requests.nvidia.com/gpu" not in hard(fake_kube)


async def test_refused_below_current_usage_unless_the_step_says_so(
    fake_kube: ScalingFakeKube, make_ctx: MakeCtx
) -> None:
    original = {"requests.nvidia.com/gpu": "8"}
    quota(fake_kube, original, used={"requests.nvidia.com/gpu": "6"})

    with pytest.raises(StepFailed, match="below what the namespace uses now"):
        await reclaim(make_ctx, by=4)
    assert hard(fake_kube) == original
    assert not fake_kube.writes("resourcequotas")

    clamped = await reclaim(make_ctx, by=4, below_usage="clamp")
    assert hard(fake_kube) == {"requests.nvidia.com/gpu": "6"}
    await restore(make_ctx, clamped.output)

    await reclaim(make_ctx, by=4, below_usage="allow")
    assert hard(fake_kube) == {"requests.nvidia.com/gpu": "4"}


async def test_usage_counted_from_pods_when_the_quota_does_not_track_it(
    fake_kube: ScalingFakeKube, make_ctx: MakeCtx
) -> None:
    idle_deployment(fake_kube, NS, replicas=2, gpus=2)  # 4 GPUs requested by running pods
    quota(fake_kube, {"requests.cpu": "8"})
    with pytest.raises(StepFailed, match=r"uses now \(4\)"):
        await reclaim(make_ctx, to=3)


async def test_rerun_after_a_crash_lowers_once_from_the_original(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    quota(fake_kube, {"requests.nvidia.com/gpu": "8"}, used={"requests.nvidia.com/gpu": "0"})
    action = ReclaimQuota()
    params = action.parse({"namespace": NS, "by": 3})
    checkpoints = Checkpoints()
    first = await action.run(await make_ctx(None, None, context={}, checkpoints=checkpoints), params)
    again = await action.run(
        await make_ctx(None, None, context={}, progress=checkpoints.last, checkpoints=checkpoints), params
    )
    assert hard(fake_kube) == {"requests.nvidia.com/gpu": "5"}
    assert len(fake_kube.requests("patch", "resourcequotas")) == 1
    assert again.output["quotas"][0]["changes"] == first.output["quotas"][0]["changes"]
    await restore(make_ctx, again.output)
    assert hard(fake_kube) == {"requests.nvidia.com/gpu": "8"}


async def test_restore_leaves_a_value_someone_changed_since(fake_kube: ScalingFakeKube, make_ctx: MakeCtx) -> None:
    quota(fake_kube, {"requests.nvidia.com/gpu": "8", "limits.nvidia.com/gpu": "8"}, used={})
    result = await reclaim(make_ctx, by=2)
    fake_kube.write("resourcequotas", NS, "gpus", {"spec": {"hard": {"limits.nvidia.com/gpu": "1"}}})

    undone = await restore(make_ctx, result.output)

    assert hard(fake_kube) == {"requests.nvidia.com/gpu": "8", "limits.nvidia.com/gpu": "1"}
    assert [x["key"] for x in undone.output["left"]] == ["limits.nvidia.com/gpu"]


def test_parameters_need_exactly_one_amount() -> None:
    action = ReclaimQuota()
    with pytest.raises(ValueError, match="exactly one"):
        action.parse({"by": 1, "to": 2})
    with pytest.raises(ValueError, match="exactly one"):
        action.parse({})
    with pytest.raises(ValueError, match="not GPU quota keys"):
        action.parse({"to": 1, "resources": ["requests.cpu"]})

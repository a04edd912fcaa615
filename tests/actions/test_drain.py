"""drain against the fake apiserver: selection, PDBs, timeouts, resume without double evictions."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pydantic
import pytest

from remediator.actions.base import ActionResult
from remediator.actions.drain import Drain
from remediator.actions.node import Uncordon
from remediator.errors import StepFailed
from tests.actions.conftest import NODE, Checkpoints, MakeCtx
from tests.fakekube import FakeKube


def fast() -> Drain:
    return Drain(poll_interval=0.02, backoff_initial=0.02, backoff_max=0.1)


async def drain(make_ctx: MakeCtx, params: dict[str, Any] | None = None, **ctx: Any) -> ActionResult:
    action = fast()
    return await action.run(make_ctx(**ctx), action.parse(params or {}))


def names(entries: list[dict[str, Any]]) -> set[str]:
    return {e["name"] for e in entries}


def assert_no_pod_evicted_twice(fake: FakeKube) -> None:
    repeated = [uid for uid, n in Counter(fake.evicted_uids()).items() if n > 1]
    assert repeated == []


@pytest.fixture(autouse=True)
def quick_clock(fake_kube: FakeKube) -> None:
    fake_kube.clock.set_scale(0.001)  # a 30 s grace period lasts 30 ms


async def test_gpu_drain_evicts_gpu_pods_and_skips_the_rest(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.add_namespace("ml")
    fake_kube.add_namespace("gpu-operator")
    fake_kube.add_namespace("team-infra")
    ds = fake_kube.add_daemonset("dcgm", "ml")
    fake_kube.add_pod("train", "ml", node=NODE, gpus=2)
    fake_kube.add_pod("mig", "ml", node=NODE, mig={"mig-1g.18gb": 1})
    fake_kube.add_pod("limits-only", "ml", node=NODE, gpus=1, gpu_in="limits")
    fake_kube.add_pod("init-gpu", "ml", node=NODE, init_gpus=1)
    fake_kube.add_pod("cpu", "ml", node=NODE)
    fake_kube.add_pod("exporter", "ml", node=NODE, gpus=1, owner=ds)
    fake_kube.add_mirror_pod("static", "ml", NODE, gpus=1)
    fake_kube.add_pod("finished", "ml", node=NODE, gpus=1, phase="Succeeded")
    fake_kube.add_pod("operator", "gpu-operator", node=NODE, gpus=1)
    fake_kube.add_pod("infra", "team-infra", node=NODE, gpus=1)
    fake_kube.add_pod("elsewhere", "ml", node="other-node", gpus=1)

    result = await drain(make_ctx, {"skip_namespaces": ["team-infra"]})

    assert names(result.output["evicted"]) == {"train", "mig", "limits-only", "init-gpu"}
    reasons = {s["name"]: s["reason"] for s in result.output["skipped"]}
    assert reasons == {
        "cpu": "uses no GPU",
        "exporter": "DaemonSet pod",
        "static": "mirror pod",
        "finished": "completed",
        "operator": "namespace excluded",
        "infra": "namespace excluded",
    }
    assert {c.name for c in fake_kube.requests("evict", "pods")} == {
        "train",
        "mig",
        "limits-only",
        "init-gpu",
    }
    assert fake_kube.pod("ml", "cpu") is not None
    assert fake_kube.pod("ml", "elsewhere") is not None
    assert fake_kube.node(NODE)["spec"]["unschedulable"] is True
    assert result.output["remaining"] == []


async def test_all_drain_evicts_cpu_pods_too(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    fake_kube.add_pod("cpu", node=NODE)
    fake_kube.add_pod("gpu", node=NODE, gpus=1)
    result = await drain(make_ctx, {"pods": "all"})
    assert names(result.output["evicted"]) == {"cpu", "gpu"}


async def test_own_namespace_is_never_drained(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    fake_kube.add_pod("controller", "remediator", node=NODE)
    result = await drain(make_ctx, {"pods": "all"})
    assert result.output["evicted"] == []
    assert fake_kube.requests("evict") == []


async def test_gpu_uuid_selection_uses_the_context(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    on_gpu = fake_kube.add_pod("on-gpu", node=NODE, gpus=1)
    fake_kube.add_pod("other-gpu", node=NODE, gpus=1)
    context = {
        "gpu_pods": {
            "GPU-abc": [{"namespace": "default", "name": "on-gpu", "uid": on_gpu["metadata"]["uid"]}]
        }
    }
    result = await drain(make_ctx, {"pods": "gpu:GPU-abc"}, context=context)
    assert names(result.output["evicted"]) == {"on-gpu"}
    assert {s["name"]: s["reason"] for s in result.output["skipped"]} == {"other-gpu": "not on GPU GPU-abc"}


async def test_gpu_uuid_without_context_falls_back_and_says_so(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.add_pod("a", node=NODE, gpus=1)
    fake_kube.add_pod("b", node=NODE, gpus=1)
    result = await drain(make_ctx, {"pods": "gpu:GPU-abc"})
    assert names(result.output["evicted"]) == {"a", "b"}
    assert "GPU-abc" in result.output["note"]


async def test_grace_period_is_the_smaller_of_param_and_pod(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.add_pod("slow", node=NODE, gpus=1, grace=30)
    fake_kube.add_pod("quick", node=NODE, gpus=1, grace=2)
    await drain(make_ctx, {"grace_period": 10})
    sent = {
        c.name: c.body["deleteOptions"]["gracePeriodSeconds"] for c in fake_kube.requests("evict", "pods")
    }
    assert sent == {"slow": 10, "quick": 2}


async def test_without_grace_param_the_pods_own_grace_applies(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.add_pod("p", node=NODE, gpus=1, grace=7)
    await drain(make_ctx)
    (call,) = fake_kube.requests("evict", "pods")
    assert "gracePeriodSeconds" not in (call.body.get("deleteOptions") or {})


async def test_evictions_carry_the_pod_uid_as_precondition(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    pod = fake_kube.add_pod("p", node=NODE, gpus=1)
    await drain(make_ctx)
    (call,) = fake_kube.requests("evict", "pods")
    assert call.body["deleteOptions"]["preconditions"]["uid"] == pod["metadata"]["uid"]


async def test_pdb_429_is_retried_until_the_budget_allows(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    rs = fake_kube.add_replicaset("web", replicas=1, labels={"app": "web"})
    fake_kube.add_pod("web-a", node=NODE, gpus=1, labels={"app": "web"}, owner=rs)
    fake_kube.add_pdb("web", match_labels={"app": "web"}, min_available=1)

    async def second_replica_becomes_ready() -> None:
        await fake_kube.wait_for(lambda: bool(fake_kube.requests("evict", "pods", status=429)))
        fake_kube.add_pod("web-b", node="other-node", labels={"app": "web"}, owner=rs)

    helper = asyncio.create_task(second_replica_becomes_ready())
    result = await drain(make_ctx, {"timeout": "30s"})
    await helper
    statuses = [c.status for c in fake_kube.requests("evict", "pods")]
    assert statuses[0] == 429
    assert statuses[-1] == 201
    assert names(result.output["evicted"]) == {"web-a"}
    assert fake_kube.pod("default", "web-a") is None


async def test_retry_after_from_the_server_is_respected(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.add_pod("p", node=NODE, gpus=1)
    fake_kube.fail("evict", "pods", 429, retry_after=1)
    await drain(make_ctx, {"timeout": "30s"})
    first, second = fake_kube.requests("evict", "pods")
    assert (first.status, second.status) == (429, 201)
    waited = (second.time - first.time) * 0.001  # the fake clock runs 1000x faster than real time
    assert waited >= 0.9


async def test_timeout_names_the_pods_left(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    fake_kube.add_pod("guarded", node=NODE, gpus=1, labels={"app": "db"})
    fake_kube.add_pod("free", node=NODE, gpus=1, grace=0)
    fake_kube.add_pdb("db", match_labels={"app": "db"}, min_available=1)
    with pytest.raises(StepFailed) as caught:
        await drain(make_ctx, {"timeout": "300ms"})
    assert "default/guarded" in caught.value.message
    assert "disruption budget" in caught.value.message
    assert "free" not in caught.value.message
    details = caught.value.details
    assert isinstance(details, dict)
    assert names(details["remaining"]) == {"guarded"}
    assert names(details["evicted"]) == {"free"}


async def test_two_pdbs_block_the_pod_until_the_deadline(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.add_pod("p", node=NODE, gpus=1, labels={"app": "x"})
    fake_kube.add_pdb("one", match_labels={"app": "x"}, max_unavailable=1)
    fake_kube.add_pdb("two", match_labels={"app": "x"}, max_unavailable=1)
    with pytest.raises(StepFailed, match="more than one PodDisruptionBudget"):
        await drain(make_ctx, {"timeout": "200ms"})


async def test_a_pod_that_never_terminates_times_out(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.clock.set_scale(None)
    fake_kube.add_pod("stuck", node=NODE, gpus=1)
    with pytest.raises(StepFailed, match=r"default/stuck \(still terminating\)"):
        await drain(make_ctx, {"timeout": "200ms"})
    assert len(fake_kube.requests("evict", "pods")) == 1


async def test_404_counts_as_gone(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    fake_kube.add_pod("vanishing", node=NODE, gpus=1, grace=0)
    fake_kube.add_pod("staying", node=NODE, gpus=1)

    fake_kube.before(
        "evict", "pods", lambda call: fake_kube.remove("pods", "default", "vanishing"), name="vanishing"
    )
    result = await drain(make_ctx)
    assert [c.status for c in fake_kube.requests("evict", "pods", name="vanishing")] == [404]
    assert names(result.output["evicted"]) == {"staying"}
    assert result.output["remaining"] == []


async def test_replaced_pods_count_as_gone(fake_kube: FakeKube, node: dict, make_ctx: MakeCtx) -> None:
    fake_kube.controllers = True
    fake_kube.replacement_node = NODE  # even if the replacement lands on the same node
    rs = fake_kube.add_replicaset("web", replicas=2, labels={"app": "web"})
    sts = fake_kube.add_statefulset("db", replicas=1, labels={"app": "db"})
    fake_kube.add_pod("web-a", node=NODE, gpus=1, labels={"app": "web"}, owner=rs)
    fake_kube.add_pod("db-0", node=NODE, gpus=1, labels={"app": "db"}, owner=sts)
    result = await drain(make_ctx)
    assert names(result.output["evicted"]) == {"web-a", "db-0"}
    assert_no_pod_evicted_twice(fake_kube)
    assert len(fake_kube.requests("evict", "pods")) == 2


async def test_resume_after_a_crash_never_evicts_a_pod_twice(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    for index in range(4):
        fake_kube.add_pod(f"p{index}", node=NODE, gpus=1)
    crashing = Checkpoints(crash_after=3)  # the cordon checkpoint, then two evictions
    with pytest.raises(RuntimeError, match="simulated controller crash"):
        await drain(make_ctx, checkpoints=crashing)
    result = await drain(make_ctx, progress=crashing.last)
    assert_no_pod_evicted_twice(fake_kube)
    assert fake_kube.pods("default") == []
    assert len(set(fake_kube.evicted_uids())) == 4
    assert names(result.output["evicted"]) >= {e["name"] for e in crashing.last["evicted"].values()}
    assert result.output["was_unschedulable"] is False


async def test_resume_when_the_crash_lost_the_last_checkpoint(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.clock.set_scale(None)  # evicted pods stay terminating until the test lets them go
    for index in range(3):
        fake_kube.add_pod(f"p{index}", node=NODE, gpus=1, grace=30)

    class LostWrite(Checkpoints):
        async def __call__(self, progress: dict[str, Any]) -> None:
            if progress.get("evicted"):
                raise RuntimeError("simulated crash before the checkpoint was stored")
            await super().__call__(progress)

    store = LostWrite()
    with pytest.raises(RuntimeError):
        await drain(make_ctx, checkpoints=store)
    accepted_before = set(fake_kube.evicted_uids())
    assert accepted_before
    fake_kube.clock.set_scale(0.001)
    await drain(make_ctx, progress=store.last)
    assert_no_pod_evicted_twice(fake_kube)
    assert fake_kube.pods("default") == []


async def test_drain_output_lets_uncordon_restore_the_node(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.add_pod("p", node=NODE, gpus=1)
    forward = await drain(make_ctx)
    await Uncordon().run(make_ctx(prior_output=forward.output), Uncordon().parse({}))
    fresh = fake_kube.node(NODE)
    assert not fresh["spec"].get("unschedulable")
    assert "remediator.io/state" not in fresh["metadata"]["labels"]


async def test_dry_run_drain_reports_and_writes_nothing(
    fake_kube: FakeKube, node: dict, make_ctx: MakeCtx
) -> None:
    fake_kube.add_pod("p", node=NODE, gpus=1)
    fake_kube.add_pod("cpu", node=NODE)
    result = await drain(make_ctx, dry_run=True)
    assert not result.changed
    assert names(result.output["would_evict"]) == {"p"}
    assert fake_kube.writes() == []


@pytest.mark.parametrize(
    "params", [{"pods": "some"}, {"timeout": "soon"}, {"grace_period": -1}, {"unknown": 1}]
)
def test_bad_drain_params_are_rejected(params: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        Drain().parse(params)

"""One classification and one retry policy for the Kubernetes API's failures, against the fake over HTTP.

The adapter classifies each failure once: 429 and 5xx and a refused connection are transient and name the
Kubernetes API as the dependency (429 with its Retry-After); 422, 403, 404 are permanent with the API's
message. `TransientPolicy` retries the transient ones within a time budget, never sooner than Retry-After,
and then says DependencyWaiting; a permanent one is raised at the first attempt. The fake's fault injection
and its restart with state are tested here too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from remediator.actions.base import Action, ActionContext, ActionResult, NoParams
from remediator.adapters.kube import KubeAdapter
from remediator.engine.executor import run_with_retries
from remediator.errors import Conflict, Invalid, ServiceUnavailable, StepFailed, TooManyRequests
from remediator.retrying import CONFLICT_ATTEMPTS, Backoff, DependencyWaiting, TransientPolicy, waiting_reason
from tests.actions.conftest import NODE, MakeCtx
from tests.fakekube.server import FakeKube


async def test_a_429_is_transient_with_its_retry_after_and_names_the_kubernetes_api(
    fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    fake_kube.add_node("gpu-1")
    fake_kube.faults.add(429, retry_after=3, verb="get", plural="nodes")
    with pytest.raises(TooManyRequests) as caught:
        await kube_adapter.get_node("gpu-1")
    assert caught.value.retry_after == 3 and caught.value.dependency == "kubernetes API"
    assert [c.injected for c in fake_kube.requests("get", "nodes")] == [True]
    assert await kube_adapter.list_nodes()  # another verb is not throttled


async def test_a_500_is_transient_and_a_422_is_permanent_with_the_api_message(
    fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    fake_kube.add_node("gpu-1")
    fault = fake_kube.faults.add(500, duration=60, verb="patch")
    with pytest.raises(ServiceUnavailable) as failed:
        await kube_adapter.patch_node("gpu-1", {"metadata": {"labels": {"a": "b"}}})
    assert failed.value.status == 500 and failed.value.dependency == "kubernetes API"
    fault.end = 0  # the window is over
    with pytest.raises(Invalid) as invalid:  # the fake validates label values as the API server does
        await kube_adapter.patch_node("gpu-1", {"metadata": {"labels": {"a": "not a valid value!"}}})
    assert invalid.value.status == 422 and "not a valid value!" in invalid.value.message
    attempts = 0

    async def patch() -> None:
        nonlocal attempts
        attempts += 1
        await kube_adapter.patch_node("gpu-1", {"metadata": {"labels": {"a": "not a valid value!"}}})

    with pytest.raises(Invalid):
        await TransientPolicy(budget=30).call(patch)
    assert attempts == 1  # permanent: failed once, never retried


async def test_the_policy_never_resends_sooner_than_retry_after_and_waits_after_its_budget(
    fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    fake_kube.add_node("gpu-1")
    fake_kube.faults.add(429, retry_after=1, verb="get", plural="nodes")
    with pytest.raises(DependencyWaiting) as waiting:
        await TransientPolicy(budget=2.5, base=0.1, cap=0.2).call(lambda: kube_adapter.get_node("gpu-1"))
    sent = [c.at for c in fake_kube.requests("get", "nodes")]
    assert len(sent) == 3  # at 0, >= 1 and >= 2 s: a fourth would pass the budget
    assert all(later - earlier >= 0.99 for earlier, later in itertools.pairwise(sent))
    assert waiting.value.dependency == "kubernetes API"
    assert waiting.value.reason.startswith("waiting: kubernetes API answering 429 since ")


async def test_a_transient_failure_that_ends_within_the_budget_is_retried_to_success(
    fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    fake_kube.add_node("gpu-1")
    fake_kube.faults.add(503, duration=1.0, verb="get")
    node = await TransientPolicy(budget=10, base=0.1, cap=0.3).call(lambda: kube_adapter.get_node("gpu-1"))
    assert node["metadata"]["name"] == "gpu-1"
    statuses = [c.status for c in fake_kube.requests("get", "nodes")]
    assert statuses[-1] == 200 and set(statuses[:-1]) == {503}


async def test_an_outage_refuses_connections_and_the_server_comes_back_on_the_same_port(
    fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    fake_kube.add_node("gpu-1")
    url = fake_kube.url
    outage = asyncio.ensure_future(fake_kube.outage(1.0))
    await asyncio.sleep(0.2)
    with pytest.raises(ServiceUnavailable) as down:
        await kube_adapter.get_node("gpu-1")
    assert down.value.status is None and down.value.dependency == "kubernetes API"
    assert waiting_reason(down.value, datetime_at_noon()).startswith("waiting: kubernetes API unreachable since 12:")
    await outage
    assert fake_kube.url == url
    assert (await kube_adapter.get_node("gpu-1"))["metadata"]["name"] == "gpu-1"


def datetime_at_noon() -> datetime:
    return datetime(2026, 12, 5, 12, 1, 3, tzinfo=UTC)


async def test_the_fake_restarts_with_its_state(tmp_path: Path) -> None:
    state = tmp_path / "apiserver.json"
    async with FakeKube(state_file=state) as fake:
        fake.add_node("gpu-1")
        port = fake.port
        adapter = KubeAdapter.for_host(fake.url, qps=1000.0)
        try:
            before = await adapter.patch_node("gpu-1", {"spec": {"unschedulable": True}})
        finally:
            await adapter.close()
    async with FakeKube(state_file=state, port=port) as again:
        adapter = KubeAdapter.for_host(again.url, qps=1000.0)
        try:
            node = await adapter.get_node("gpu-1")
            assert node["spec"]["unschedulable"] is True
            assert node["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
            assert node["metadata"]["uid"] == before["metadata"]["uid"]
            stale = {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": False}}
            with pytest.raises(Conflict):  # still strict: a stale resourceVersion is refused
                await adapter.patch_node("gpu-1", stale)
            newer = await adapter.patch_node("gpu-1", {"spec": {"unschedulable": False}})
            assert int(newer["metadata"]["resourceVersion"]) > int(node["metadata"]["resourceVersion"])
        finally:
            await adapter.close()


async def test_probabilistic_faults_repeat_with_the_same_seed() -> None:
    runs = []
    for _ in range(2):
        async with FakeKube(fault_seed=7) as fake:
            fake.add_node("gpu-1")
            fake.faults.add(429, probability=0.3)
            adapter = KubeAdapter.for_host(fake.url, qps=1000.0)
            try:
                for _ in range(30):
                    with contextlib.suppress(TooManyRequests):
                        await adapter.get_node("gpu-1")
            finally:
                await adapter.close()
            runs.append([c.injected for c in fake.calls])
    assert runs[0] == runs[1] and 0 < sum(runs[0]) < 30


def test_backoff_starts_low_again_when_the_failure_changes_and_honours_retry_after() -> None:
    backoff = Backoff(base=1.0, cap=30.0, jitter=False)
    down = ServiceUnavailable("refused")
    assert [backoff.next(down) for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 16.0]
    pdb = TooManyRequests("disruption budget", status=429)
    assert backoff.next(pdb) == 1.0  # the API is back: a PodDisruptionBudget's 429 waits its usual second
    assert backoff.next(TooManyRequests("throttled", status=429, retry_after=7)) == 7.0


def test_a_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="budget"):
        TransientPolicy(budget=-1)
    with pytest.raises(ValueError, match="base <= cap"):
        TransientPolicy(base=5, cap=1)


class _StaleLabel(Action[NoParams]):
    """Reads the node, then writes a label guarded by the resourceVersion it read (a 409 escapes)."""

    name = "stale_label_test"
    Params = NoParams

    async def apply(self, ctx: ActionContext, params: NoParams) -> ActionResult:
        kube = ctx.kube
        assert kube is not None
        node = await kube.get_node(NODE)
        rv = node["metadata"]["resourceVersion"]
        await kube.patch_node(NODE, {"metadata": {"resourceVersion": rv, "labels": {"checked": "yes"}}})
        return ActionResult(changed=True, message="labelled")


async def test_a_conflict_escaping_an_action_runs_it_again_at_once_a_few_times(
    fake_kube: FakeKube, node: dict[str, Any], make_ctx: MakeCtx
) -> None:
    action = _StaleLabel()
    fake_kube.before(  # another writer gets in between the read and the write, twice
        "patch", "nodes", lambda call: fake_kube.write("nodes", None, NODE, {"metadata": {"labels": {"x": "y"}}}),
        times=2,
    )
    result = await run_with_retries(action, make_ctx(), NoParams(), timeout=30)
    assert result.changed
    assert [c.status for c in fake_kube.requests("patch", "nodes")] == [409, 409, 200]

    fake_kube.before(
        "patch", "nodes", lambda call: fake_kube.write("nodes", None, NODE, {"metadata": {"labels": {"x": "z"}}}),
        times=1000,
    )
    with pytest.raises(StepFailed, match=f"Conflict: .*\\({CONFLICT_ATTEMPTS} attempts\\)"):
        await run_with_retries(action, make_ctx(), NoParams(), timeout=30)


async def test_a_delay_fault_slows_answers_without_failing_them(
    fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    fake_kube.add_node("gpu-1")
    fault = fake_kube.faults.add(None, delay=0.3, path=r"^/api/v1/nodes/gpu-1$")
    started = asyncio.get_running_loop().time()
    assert (await kube_adapter.get_node("gpu-1"))["metadata"]["name"] == "gpu-1"
    assert asyncio.get_running_loop().time() - started >= 0.3 and fault.fired == 1
    assert not fake_kube.requests("get", "nodes")[0].injected
    with pytest.raises(ValueError, match="fault status"):
        fake_kube.faults.add(418)

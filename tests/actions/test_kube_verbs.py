"""The Kubernetes adapter, the RBAC and the fake API server share one kind table (remediator/kube/kinds.py).

Every adapter call is made against a fake that grants only what the controller's ClusterRole grants; each
must get through, and together they must use every verb of the table, so the table lists nothing the
controller does not do and the controller does nothing the table (and so RBAC) does not grant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from remediator.adapters.kube import KubeAdapter, Mutation
from remediator.errors import Conflict, Forbidden, NotFound, NotSupported
from remediator.kube import kinds as kube_kinds
from remediator.kube.kinds import Verb
from tests.fakekube.server import CONTROLLER_GRANTS, Call, FakeKube
from tests.fakekube.store import BY_PLURAL
from tests.idle.fakescale import ScalingFakeKube


@pytest.fixture
async def fake() -> AsyncIterator[FakeKube]:
    async with ScalingFakeKube() as served:
        yield served
        internal = served.internal_errors()
    assert not internal, f"the fake apiserver failed internally: {internal!r}"


@pytest.fixture
async def kube(fake: FakeKube) -> AsyncIterator[KubeAdapter]:
    adapter = KubeAdapter.for_host(fake.url, qps=1000.0)
    try:
        yield adapter
    finally:
        await adapter.close()


def grant_of(call: Call) -> tuple[str, str, str]:
    assert call.plural is not None
    resource = call.plural if call.subresource is None else f"{call.plural}/{call.subresource}"
    return BY_PLURAL[call.plural].group, resource, "create" if call.verb == "evict" else call.verb


async def use_every_verb(fake: FakeKube, kube: KubeAdapter) -> None:
    """Each public call of the adapter once (the objects exist, so every write really happens)."""
    fake.add_namespace("ml")
    fake.add_node("n1")
    fake.add_pod("p1", "ml", node="n1")
    fake.add_pod("p2", "ml", node="n1")
    for add in (fake.add_deployment, fake.add_statefulset, fake.add_replicaset, fake.add_daemonset):
        add("w", "ml")
    fake.add_cronjob("c", "ml")
    fake.add_job("j", "ml")
    fake.add_resource_quota("q", "ml", {"requests.nvidia.com/gpu": "8"})

    await kube.get_node("n1")
    await kube.list_nodes()
    pages = [page async for page in kube.node_pages()]
    async for _ in kube.watch_nodes(pages[-1][1], timeout_seconds=1):
        pass
    await kube.patch_node("n1", {"spec": {"unschedulable": True}})
    await kube.patch_node_status("n1", {"status": {"conditions": []}})
    await kube.get_pod("ml", "p1")
    await kube.list_pods("ml")
    await kube.list_pods_on_node("n1")
    await kube.patch_object("Pod", "ml", "p1", {"metadata": {"annotations": {"k": "v"}}})
    await kube.evict_pod("ml", "p2")
    await kube.create_event(
        "ml", {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "ml"}}
    )
    await kube.get_namespace("ml")
    for kind in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "CronJob", "Job"):
        await kube.get_object(kind, "ml", "c" if kind == "CronJob" else "j" if kind == "Job" else "w")
    with pytest.raises(NotFound):  # no builder for them; the read itself is what is granted
        await kube.get_object("ReplicationController", "ml", "rc")
    await kube.patch_job("ml", "j", {"spec": {"suspend": True}})
    for kind in ("Deployment", "StatefulSet"):
        await kube.get_scale(kind, "ml", "w")
        await kube.patch_scale(kind, "ml", "w", 0)
    await kube.get_resource_quota("ml", "q")
    await kube.list_resource_quotas("ml")
    await kube.patch_resource_quota("ml", "q", {"spec": {"hard": {"requests.nvidia.com/gpu": "4"}}})


async def test_the_adapter_uses_exactly_the_verbs_of_the_kind_table_and_rbac_grants_each(
    fake: FakeKube, kube: KubeAdapter
) -> None:
    await use_every_verb(fake, kube)
    assert [c for c in fake.calls if c.status == 403] == []
    used = {grant_of(c) for c in fake.calls}
    table = {grant for kind in kube_kinds.KINDS for grant in kind.grants()}
    assert used == table
    assert used <= CONTROLLER_GRANTS


async def test_a_verb_the_grants_lack_is_forbidden_by_the_fake() -> None:
    async with FakeKube(grants=CONTROLLER_GRANTS - {("", "resourcequotas", "list")}) as fake:
        fake.add_namespace("ml")
        adapter = KubeAdapter.for_host(fake.url, qps=1000.0)
        try:
            with pytest.raises(Forbidden) as caught:
                await adapter.list_resource_quotas("ml")
        finally:
            await adapter.close()
    assert 'cannot list resource "resourcequotas" in API group "" in the namespace "ml"' in caught.value.message


def test_an_operation_the_table_does_not_list_cannot_be_built() -> None:
    with pytest.raises(LookupError, match="does not grant patch on namespaces"):
        kube_kinds.operation("Namespace", Verb.PATCH)
    with pytest.raises(LookupError, match="does not grant create on pods/binding"):
        kube_kinds.operation("Pod", Verb.CREATE, "binding")
    with pytest.raises(LookupError, match="no PodDisruptionBudget"):
        kube_kinds.operation("PodDisruptionBudget", Verb.GET)


async def test_a_kind_named_at_run_time_is_refused_unless_the_table_grants_the_verb(
    fake: FakeKube, kube: KubeAdapter
) -> None:
    for call in (
        kube.get_object("PodDisruptionBudget", "default", "budget"),
        kube.get_object("Node", "default", "n1"),  # not namespaced: get_node reads nodes
        kube.patch_object("Deployment", "default", "web", {"spec": {"replicas": 0}}),
        kube.get_scale("Job", "default", "j"),
    ):
        with pytest.raises(NotSupported):
            await call
    assert fake.calls == []


async def test_writes_are_audited_by_the_table_s_names(fake: FakeKube, kube: KubeAdapter) -> None:
    seen: list[Mutation] = []

    async def record(mutation: Mutation) -> None:
        seen.append(mutation)

    kube.recorder = record
    fake.add_node("n1")
    await kube.get_node("n1")
    await kube.patch_node_status("n1", {"status": {"conditions": []}})
    event = {"metadata": {"name": "e1"}, "involvedObject": {"kind": "Node", "name": "n1"}}
    await kube.create_event("default", event)
    with pytest.raises(Conflict):
        await kube.create_event("default", event)
    assert [dataclasses.astuple(m)[:5] for m in seen] == [
        ("patch", "node_status", None, "n1", 200),
        ("create", "event", "default", "e1", 200),
        ("create", "event", "default", "e1", 409),
    ]

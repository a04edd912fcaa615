"""The pods/eviction subresource of the fake: PodDisruptionBudgets, lingering deletion, replacement pods."""

from __future__ import annotations

import pytest

from tests.fakekube import FakeKube
from tests.fakekube_tests.conftest import Raw


@pytest.fixture
def web(fake_kube: FakeKube) -> dict:
    fake_kube.clock.set_scale(None)  # frozen: pods linger until the test advances the clock
    fake_kube.add_node("n1")
    rs = fake_kube.add_replicaset("web", replicas=2, labels={"app": "web"})
    for name in ("web-a", "web-b"):
        fake_kube.add_pod(name, node="n1", labels={"app": "web"}, owner=rs, grace=30)
    return rs


async def test_evicting_a_missing_pod_is_404(raw: Raw, fake_kube: FakeKube) -> None:
    status, body, _ = await raw.evict("default", "ghost")
    assert status == 404
    assert body["reason"] == "NotFound"


async def test_eviction_body_must_name_the_pod(raw: Raw, web: dict) -> None:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}}
    status, _, _ = await raw.request("POST", "/api/v1/namespaces/default/pods/web-a/eviction", body)
    assert status == 400


async def test_evicted_pod_lingers_until_its_grace_period_passes(
    raw: Raw, fake_kube: FakeKube, web: dict
) -> None:
    status, _, _ = await raw.evict("default", "web-a")
    assert status == 201
    pod = fake_kube.pod("default", "web-a")
    assert pod is not None
    assert pod["metadata"]["deletionTimestamp"]
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    fake_kube.clock.advance(29)
    assert fake_kube.pod("default", "web-a") is not None
    fake_kube.clock.advance(1)
    assert fake_kube.pod("default", "web-a") is None
    status, _ = await raw.get("/api/v1/namespaces/default/pods/web-a")
    assert status == 404


async def test_eviction_grace_period_overrides_the_pods(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    await raw.evict("default", "web-a", {"gracePeriodSeconds": 5})
    fake_kube.clock.advance(5)
    assert fake_kube.pod("default", "web-a") is None


async def test_zero_grace_deletes_at_once(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    await raw.evict("default", "web-a", {"gracePeriodSeconds": 0})
    assert fake_kube.pod("default", "web-a") is None


async def test_pdb_that_allows_no_disruption_answers_429(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    fake_kube.add_pdb("web", match_labels={"app": "web"}, min_available=2)
    status, body, headers = await raw.evict("default", "web-a")
    assert status == 429
    assert "disruption budget" in body["message"]
    assert "Retry-After" not in headers
    assert fake_kube.pod("default", "web-a")["metadata"].get("deletionTimestamp") is None


async def test_pdb_counts_terminating_pods_as_unhealthy(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    fake_kube.add_pdb("web", match_labels={"app": "web"}, min_available=1)
    first, _, _ = await raw.evict("default", "web-a")
    second, _, _ = await raw.evict("default", "web-b")
    assert (first, second) == (201, 429)


async def test_pdb_max_unavailable_percent_uses_controller_replicas(
    raw: Raw, fake_kube: FakeKube, web: dict
) -> None:
    fake_kube.add_pdb("web", match_labels={"app": "web"}, max_unavailable="50%")
    first, _, _ = await raw.evict("default", "web-a")
    second, _, _ = await raw.evict("default", "web-b")
    assert (first, second) == (201, 429)


async def test_pdb_retry_after_is_sent_when_configured(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    fake_kube.pdb_retry_after = 7
    fake_kube.add_pdb("web", match_labels={"app": "web"}, min_available=2)
    status, _, headers = await raw.evict("default", "web-a")
    assert status == 429
    assert headers["Retry-After"] == "7"


async def test_two_pdbs_selecting_the_pod_answer_500(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    fake_kube.add_pdb("one", match_labels={"app": "web"}, max_unavailable=1)
    fake_kube.add_pdb(
        "two", selector={"matchExpressions": [{"key": "app", "operator": "Exists"}]}, max_unavailable=1
    )
    status, body, _ = await raw.evict("default", "web-a")
    assert status == 500
    assert "more than one PodDisruptionBudget" in body["message"]


async def test_pdb_with_null_selector_selects_nothing(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    fake_kube.add_pdb("none", selector=None, min_available=5)
    status, _, _ = await raw.evict("default", "web-a")
    assert status == 201


async def test_pdb_in_another_namespace_does_not_apply(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    fake_kube.add_namespace("other")
    fake_kube.add_pdb("web", "other", match_labels={"app": "web"}, min_available=5)
    status, _, _ = await raw.evict("default", "web-a")
    assert status == 201


async def test_finished_pods_are_evicted_despite_the_pdb(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    fake_kube.add_pdb("web", match_labels={"app": "web"}, min_available=2)
    fake_kube.set_pod_phase("default", "web-a", "Succeeded")
    status, _, _ = await raw.evict("default", "web-a")
    assert status == 201
    assert fake_kube.pod("default", "web-a") is None


async def test_uid_precondition_protects_a_same_name_replacement(
    raw: Raw, fake_kube: FakeKube, web: dict
) -> None:
    status, _, _ = await raw.evict("default", "web-a", {"preconditions": {"uid": "not-the-uid"}})
    assert status == 409
    assert fake_kube.pod("default", "web-a")["metadata"].get("deletionTimestamp") is None


async def test_replicaset_controller_replaces_evicted_pods(raw: Raw, fake_kube: FakeKube, web: dict) -> None:
    fake_kube.controllers = True
    old_uid = fake_kube.pod("default", "web-a")["metadata"]["uid"]
    await raw.evict("default", "web-a")
    names = {p["metadata"]["name"] for p in fake_kube.pods("default")}
    replacements = names - {"web-a", "web-b"}
    assert len(replacements) == 1
    new = fake_kube.pod("default", replacements.pop())
    assert new["metadata"]["name"].startswith("web-")
    assert new["metadata"]["uid"] != old_uid
    assert "nodeName" not in new["spec"]


async def test_statefulset_pod_comes_back_with_the_same_name_and_a_new_uid(
    raw: Raw, fake_kube: FakeKube
) -> None:
    fake_kube.controllers = True
    fake_kube.add_node("n1")
    sts = fake_kube.add_statefulset("db", replicas=1)
    old = fake_kube.add_pod("db-0", node="n1", labels={"app": "db"}, owner=sts, grace=10)
    await raw.evict("default", "db-0")
    fake_kube.clock.advance(11)
    new = fake_kube.pod("default", "db-0")
    assert new is not None
    assert new["metadata"]["uid"] != old["metadata"]["uid"]


async def test_pods_disappear_on_their_own_with_a_running_clock(fake_kube: FakeKube, raw: Raw) -> None:
    fake_kube.clock.set_scale(0.001)
    fake_kube.add_node("n1")
    fake_kube.add_pod("p", node="n1", grace=2)
    await raw.evict("default", "p")
    await fake_kube.wait_for(lambda: fake_kube.pod("default", "p") is None)


async def test_request_log_records_evictions_with_the_pod_uid(
    raw: Raw, fake_kube: FakeKube, web: dict
) -> None:
    uid = fake_kube.pod("default", "web-a")["metadata"]["uid"]
    await raw.evict("default", "web-a", {"gracePeriodSeconds": 3})
    (call,) = fake_kube.requests("evict", "pods")
    assert (call.name, call.status, call.uid) == ("web-a", 201, uid)
    assert call.body["deleteOptions"]["gracePeriodSeconds"] == 3
    assert fake_kube.evicted_uids() == [uid]


async def test_max_at_once_replays_node_history(raw: Raw, fake_kube: FakeKube) -> None:
    for name in ("a", "b", "c"):
        fake_kube.add_node(name)
    for name in ("a", "b"):
        await raw.smp(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
    await raw.smp("/api/v1/nodes/a", {"spec": {"unschedulable": None}})
    await raw.smp("/api/v1/nodes/c", {"spec": {"unschedulable": True}})
    assert fake_kube.max_at_once("nodes", lambda n: bool(n["spec"].get("unschedulable"))) == 2


async def test_injected_failures_answer_instead_of_the_server(
    raw: Raw, fake_kube: FakeKube, web: dict
) -> None:
    fake_kube.fail("get", "pods", 503, name="web-a", retry_after=2)
    status, _, headers = await raw.request("GET", "/api/v1/namespaces/default/pods/web-a")
    assert (status, headers.get("Retry-After")) == (503, "2")
    status, _ = await raw.get("/api/v1/namespaces/default/pods/web-a")
    assert status == 200

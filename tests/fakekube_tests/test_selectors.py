"""List calls on the fake honour fieldSelector and labelSelector, and reject what a real server rejects."""

from __future__ import annotations

import pytest

from tests.fakekube import FakeKube, builders
from tests.fakekube_tests.conftest import Raw


@pytest.fixture
def cluster(fake_kube: FakeKube) -> None:
    fake_kube.add_namespace("ml")
    fake_kube.add_node("n1", labels={"gpu": "h200", "zone": "a"})
    fake_kube.add_node("n2", labels={"gpu": "a100"})
    fake_kube.add_node("n3", labels={"zone": "b"})
    fake_kube.add_pod("train", "ml", node="n1", labels={"app": "train", "tier": "gpu"})
    fake_kube.add_pod("serve", "ml", node="n2", labels={"app": "serve"})
    fake_kube.add_pod("done", "default", node="n1", labels={"app": "batch"}, phase="Succeeded")


async def names(raw: Raw, path: str, **params: str) -> list[str]:
    status, body = await raw.get(path, **params)
    assert status == 200, body
    return sorted(item["metadata"]["name"] for item in body["items"])


async def test_field_selector_on_node_name(raw: Raw, cluster: None) -> None:
    assert await names(raw, "/api/v1/pods", fieldSelector="spec.nodeName=n1") == ["done", "train"]


async def test_node_name_selector_follows_deletes_and_bulk_loads(raw: Raw, cluster: None, fake_kube: FakeKube) -> None:
    """Lists by spec.nodeName are answered from an index (as the apiserver's watch cache does): it must
    forget a removed pod, see one stored later, and cover objects bulk-loaded without the change log."""
    fake_kube.remove("pods", "ml", "train")
    fake_kube.add_pod("late", "ml", node="n1")
    loaded = builders.pod_body("loaded", "ml", node="n1")
    fake_kube.load([loaded])
    assert await names(raw, "/api/v1/pods", fieldSelector="spec.nodeName=n1") == ["done", "late", "loaded"]
    assert await names(raw, "/api/v1/namespaces/ml/pods", fieldSelector="spec.nodeName=n1") == ["late", "loaded"]
    assert await names(raw, "/api/v1/pods", fieldSelector="spec.nodeName=n9") == []


async def test_field_selectors_combine_and_negate(raw: Raw, cluster: None) -> None:
    found = await names(raw, "/api/v1/pods", fieldSelector="spec.nodeName==n1,status.phase!=Succeeded")
    assert found == ["train"]


async def test_field_selector_on_name_and_namespace(raw: Raw, cluster: None) -> None:
    assert await names(raw, "/api/v1/pods", fieldSelector="metadata.namespace=ml,metadata.name!=train") == [
        "serve"
    ]
    assert await names(raw, "/api/v1/nodes", fieldSelector="metadata.name=n2") == ["n2"]


async def test_namespaced_list_only_returns_that_namespace(raw: Raw, cluster: None) -> None:
    assert await names(raw, "/api/v1/namespaces/ml/pods") == ["serve", "train"]


async def test_unknown_field_selector_is_400(raw: Raw, cluster: None) -> None:
    status, body = await raw.get("/api/v1/pods", fieldSelector="spec.containers=x")
    assert status == 400
    assert "not a known field selector" in body["message"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("gpu=h200", ["n1"]),
        ("gpu==a100", ["n2"]),
        ("gpu!=h200", ["n2", "n3"]),
        ("gpu in (h200,a100)", ["n1", "n2"]),
        ("gpu notin (h200)", ["n2", "n3"]),
        ("zone", ["n1", "n3"]),
        ("!zone", ["n2"]),
        ("gpu,zone=a", ["n1"]),
    ],
)
async def test_label_selector_operators(raw: Raw, cluster: None, selector: str, expected: list[str]) -> None:
    assert await names(raw, "/api/v1/nodes", labelSelector=selector) == expected


@pytest.mark.parametrize("selector", ["gpu in (h200", "gpu===x", "a b", "gpu in ()", "Bad_Prefix.io/k=v"])
async def test_malformed_label_selector_is_400(raw: Raw, cluster: None, selector: str) -> None:
    status, _ = await raw.get("/api/v1/nodes", labelSelector=selector)
    assert status == 400


async def test_list_items_carry_no_kind_but_the_list_has_a_resource_version(raw: Raw, cluster: None) -> None:
    _, body = await raw.get("/api/v1/nodes")
    assert body["kind"] == "NodeList"
    assert body["metadata"]["resourceVersion"]
    assert all("kind" not in item for item in body["items"])


async def test_limit_and_continue_page_through_a_list(raw: Raw, cluster: None) -> None:
    _, first = await raw.get("/api/v1/nodes", limit="2")
    _, second = await raw.get("/api/v1/nodes", limit="2", **{"continue": first["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in first["items"] + second["items"]] == ["n1", "n2", "n3"]
    assert "continue" not in second["metadata"]


async def test_namespaces_list_with_a_label_selector(raw: Raw, fake_kube: FakeKube) -> None:
    fake_kube.add_namespace("opted-out", labels={"remediator.io/exclude": "true"})
    assert await names(raw, "/api/v1/namespaces", labelSelector="remediator.io/exclude=true") == ["opted-out"]
    status, body = await raw.get("/api/v1/namespaces/opted-out")
    assert (status, body["kind"]) == (200, "Namespace")


async def test_discovery_lists_the_served_resources(raw: Raw) -> None:
    status, body = await raw.get("/apis/policy/v1")
    assert status == 200
    assert {r["name"] for r in body["resources"]} >= {"poddisruptionbudgets", "poddisruptionbudgets/status"}
    _, core = await raw.get("/api/v1")
    assert "pods/eviction" in {r["name"] for r in core["resources"]}

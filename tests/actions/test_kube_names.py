"""Names from alert labels never reach a wrong API path or widen a field selector.

`.` and `..` are normalised away by HTTP clients (`/api/v1/nodes/..` is `/api/v1/`), `a/b` is a path of its
own, and `,`/`=` add selector requirements: the adapter refuses each before building a request, so the
strict fake API server sees nothing at all.
"""

from __future__ import annotations

import pytest

from remediator.adapters.kube import KubeAdapter
from remediator.errors import Invalid
from remediator.kube.object_names import escape_field_selector_value
from tests.fakekube import FakeKube
from tests.fakekube.selectors import SelectorError, parse_field_selector

BAD_NAMES = [".", "..", "a/b", "x,spec.nodeName=y", "", "Node-1", "n" * 254, "a\\b", "%2e%2e"]


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_bad_node_names_are_refused_before_any_request(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, name: str
) -> None:
    fake_kube.add_node("n1")
    fake_kube.add_pod("p1", "ml", node="n1", gpus=0)
    for call in (
        kube_adapter.get_node(name),
        kube_adapter.patch_node(name, {"spec": {"unschedulable": True}}),
        kube_adapter.patch_node_status(name, {"status": {"conditions": []}}),
        kube_adapter.list_pods_on_node(name),
    ):
        with pytest.raises(Invalid) as caught:
            await call
        assert "node name" in caught.value.message
    assert fake_kube.calls == []
    assert not (fake_kube.node("n1") or {})["spec"].get("unschedulable")


@pytest.mark.parametrize("namespace", [".", "..", "a/b", "ML", "x" * 64])
async def test_bad_namespaces_are_refused_before_any_request(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, namespace: str
) -> None:
    for call in (
        kube_adapter.get_pod(namespace, "p1"),
        kube_adapter.list_pods(namespace),
        kube_adapter.evict_pod(namespace, "p1"),
        kube_adapter.get_namespace(namespace),
        kube_adapter.patch_resource_quota(namespace, "q", {"spec": {"hard": {}}}),
        kube_adapter.list_resource_quotas(namespace),
        kube_adapter.get_object("Deployment", namespace, "d"),
        kube_adapter.patch_object("Job", namespace, "j", {"spec": {"suspend": True}}),
        kube_adapter.get_scale("Deployment", namespace, "d"),
        kube_adapter.patch_scale("StatefulSet", namespace, "s", 0),
        kube_adapter.create_event(namespace, {"metadata": {"name": "e"}, "involvedObject": {}}),
    ):
        with pytest.raises(Invalid) as caught:
            await call
        assert "namespace" in caught.value.message
    assert fake_kube.calls == []


@pytest.mark.parametrize("name", [".", "..", "a/b", "p,x=y"])
async def test_bad_object_names_are_refused_before_any_request(
    fake_kube: FakeKube, kube_adapter: KubeAdapter, name: str
) -> None:
    for call in (
        kube_adapter.get_pod("ml", name),
        kube_adapter.evict_pod("ml", name),
        kube_adapter.get_object("Deployment", "ml", name),
        kube_adapter.patch_object("Pod", "ml", name, {"metadata": {"labels": {"k": "v"}}}),
        kube_adapter.get_scale("Deployment", "ml", name),
        kube_adapter.patch_scale("Deployment", "ml", name, 0),
    ):
        with pytest.raises(Invalid):
            await call
    assert fake_kube.calls == []


async def test_a_valid_node_name_selects_its_pods_only(fake_kube: FakeKube, kube_adapter: KubeAdapter) -> None:
    fake_kube.add_node("gpu-1.rack-2")
    fake_kube.add_node("gpu-2")
    fake_kube.add_pod("p1", "ml", node="gpu-1.rack-2", gpus=0)
    fake_kube.add_pod("p2", "ml", node="gpu-2", gpus=0)
    pods = await kube_adapter.list_pods_on_node("gpu-1.rack-2")
    assert [p["metadata"]["name"] for p in pods] == ["p1"]
    [call] = fake_kube.requests("list", "pods")
    assert call.params["fieldSelector"] == "spec.nodeName=gpu-1.rack-2"


def test_field_selector_values_are_escaped_as_the_apiserver_grammar_wants() -> None:
    value = "x,spec.nodeName=y\\z"
    escaped = escape_field_selector_value(value)
    assert escaped == "x\\,spec.nodeName\\=y\\\\z"
    [requirement] = parse_field_selector(f"spec.nodeName={escaped}", "pods")
    assert (requirement.field, requirement.value) == ("spec.nodeName", value)


def test_the_fake_apiserver_parses_field_selectors_as_strictly_as_a_real_one() -> None:
    # An unescaped comma starts a second requirement; escapes other than \\ \, \= are refused.
    assert len(parse_field_selector("spec.nodeName=x,spec.nodeName=y", "pods")) == 2
    with pytest.raises(SelectorError):
        parse_field_selector("spec.nodeName=a\\b", "pods")
    with pytest.raises(SelectorError):
        parse_field_selector("spec.nodeName=a=b", "pods")

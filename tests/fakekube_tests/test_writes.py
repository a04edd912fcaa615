"""The fake refuses writes a real apiserver refuses: stale or missing resourceVersion, bad syntax."""

from __future__ import annotations

import pytest

from tests.fakekube import FakeKube
from tests.fakekube_tests.conftest import Raw

NODE = "/api/v1/nodes/n1"


@pytest.fixture
def node(fake_kube: FakeKube) -> dict:
    return fake_kube.add_node(
        "n1", labels={"team": "a"}, taints=[{"key": "other", "value": "x", "effect": "NoSchedule"}]
    )


async def test_every_write_increments_the_resource_version(raw: Raw, node: dict) -> None:
    _, before = await raw.get(NODE)
    status, after = await raw.smp(NODE, {"metadata": {"labels": {"b": "1"}}})
    assert status == 200
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])


async def test_a_patch_that_changes_nothing_keeps_the_resource_version(raw: Raw, node: dict) -> None:
    _, before = await raw.get(NODE)
    _, after = await raw.smp(NODE, {"metadata": {"labels": {"team": "a"}}})
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_put_without_resource_version_is_422(raw: Raw, node: dict) -> None:
    _, current = await raw.get(NODE)
    del current["metadata"]["resourceVersion"]
    status, body, _ = await raw.request("PUT", NODE, current)
    assert status == 422
    assert "resourceVersion" in body["message"]


async def test_put_with_a_stale_resource_version_is_409(raw: Raw, fake_kube: FakeKube, node: dict) -> None:
    _, current = await raw.get(NODE)
    fake_kube.write("nodes", None, "n1", {"metadata": {"labels": {"racer": "won"}}})
    current["metadata"]["labels"]["mine"] = "x"
    status, body, _ = await raw.request("PUT", NODE, current)
    assert status == 409
    assert body["reason"] == "Conflict"
    assert "mine" not in fake_kube.node("n1")["metadata"]["labels"]


async def test_put_with_the_current_resource_version_replaces(
    raw: Raw, fake_kube: FakeKube, node: dict
) -> None:
    _, current = await raw.get(NODE)
    current["metadata"]["labels"] = {"only": "this"}
    status, _, _ = await raw.request("PUT", NODE, current)
    assert status == 200
    assert fake_kube.node("n1")["metadata"]["labels"] == {"only": "this"}


async def test_patch_carrying_a_stale_resource_version_is_409(
    raw: Raw, fake_kube: FakeKube, node: dict
) -> None:
    _, current = await raw.get(NODE)
    fake_kube.write("nodes", None, "n1", {"metadata": {"labels": {"racer": "won"}}})
    status, _ = await raw.smp(
        NODE,
        {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"unschedulable": True},
        },
    )
    assert status == 409
    assert not fake_kube.node("n1")["spec"].get("unschedulable")


@pytest.mark.parametrize("value", ["x" * 64, "has space", "-leading", "trailing-", "a/b", "ünï"])
async def test_invalid_label_values_are_422(raw: Raw, fake_kube: FakeKube, node: dict, value: str) -> None:
    status, body = await raw.smp(NODE, {"metadata": {"labels": {"k": value}}})
    assert status == 422
    assert body["reason"] == "Invalid"
    assert "k" not in fake_kube.node("n1")["metadata"]["labels"]


@pytest.mark.parametrize("value", ["x" * 63, "", "a.b_c-d", "Z9"])
async def test_valid_label_values_are_accepted(raw: Raw, node: dict, value: str) -> None:
    status, _ = await raw.smp(NODE, {"metadata": {"labels": {"k": value}}})
    assert status == 200


async def test_invalid_label_keys_are_422(raw: Raw, node: dict) -> None:
    status, _ = await raw.smp(NODE, {"metadata": {"labels": {"Bad_Prefix.io/x": "v"}}})
    assert status == 422


@pytest.mark.parametrize("effect", ["NoExecuteNow", "", "noschedule"])
async def test_unknown_taint_effects_are_422(raw: Raw, node: dict, effect: str) -> None:
    status, body = await raw.smp(NODE, {"spec": {"taints": [{"key": "k", "effect": effect}]}})
    assert status == 422
    assert "effect" in body["message"]


async def test_duplicate_taints_by_key_and_effect_are_422(raw: Raw, node: dict) -> None:
    taints = [
        {"key": "k", "value": "a", "effect": "NoSchedule"},
        {"key": "k", "value": "b", "effect": "NoSchedule"},
    ]
    status, _ = await raw.smp(NODE, {"spec": {"taints": taints}})
    assert status == 422


async def test_taint_values_follow_label_value_syntax(raw: Raw, node: dict) -> None:
    status, _ = await raw.smp(
        NODE, {"spec": {"taints": [{"key": "k", "value": "xid 79!", "effect": "NoSchedule"}]}}
    )
    assert status == 422


async def test_strategic_merge_replaces_node_taints_as_a_whole(
    raw: Raw, fake_kube: FakeKube, node: dict
) -> None:
    status, _ = await raw.smp(NODE, {"spec": {"taints": [{"key": "mine", "effect": "NoSchedule"}]}})
    assert status == 200
    assert fake_kube.node("n1")["spec"]["taints"] == [{"key": "mine", "effect": "NoSchedule"}]


async def test_strategic_merge_merges_labels_and_null_deletes(
    raw: Raw, fake_kube: FakeKube, node: dict
) -> None:
    await raw.smp(NODE, {"metadata": {"labels": {"added": "1", "team": None}}})
    labels = fake_kube.node("n1")["metadata"]["labels"]
    assert labels["added"] == "1"
    assert "team" not in labels
    assert labels["kubernetes.io/hostname"] == "n1"


async def test_merge_patch_merges_annotations(raw: Raw, fake_kube: FakeKube, node: dict) -> None:
    fake_kube.write("nodes", None, "n1", {"metadata": {"annotations": {"keep": "1", "drop": "2"}}})
    status, _, _ = await raw.request(
        "PATCH",
        NODE,
        {"metadata": {"annotations": {"drop": None, "new": "3"}}},
        content_type="application/merge-patch+json",
    )
    assert status == 200
    assert fake_kube.node("n1")["metadata"]["annotations"] == {"keep": "1", "new": "3"}


async def test_json_patch_test_operation_guards_the_write(raw: Raw, fake_kube: FakeKube, node: dict) -> None:
    ops = [
        {"op": "test", "path": "/metadata/labels/team", "value": "b"},
        {"op": "add", "path": "/metadata/labels/x", "value": "1"},
    ]
    status, _, _ = await raw.request("PATCH", NODE, ops, content_type="application/json-patch+json")
    assert status == 422
    assert "x" not in fake_kube.node("n1")["metadata"]["labels"]


async def test_unknown_patch_content_type_is_415(raw: Raw, node: dict) -> None:
    status, _, _ = await raw.request("PATCH", NODE, {"metadata": {}}, content_type="application/json")
    assert status == 415


async def test_status_is_ignored_when_patching_the_main_resource(raw: Raw, fake_kube: FakeKube) -> None:
    fake_kube.add_node("n1")
    fake_kube.add_pod("p", node="n1")
    status, _ = await raw.smp("/api/v1/namespaces/default/pods/p", {"status": {"phase": "Failed"}})
    assert status == 200
    assert fake_kube.pod("default", "p")["status"]["phase"] == "Running"


async def test_pod_spec_is_immutable(raw: Raw, fake_kube: FakeKube) -> None:
    fake_kube.add_node("n1")
    fake_kube.add_pod("p", node="n1")
    status, _ = await raw.smp("/api/v1/namespaces/default/pods/p", {"spec": {"nodeName": "elsewhere"}})
    assert status == 422


async def test_create_needs_an_existing_namespace(raw: Raw) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    status, body_out, _ = await raw.request("POST", "/api/v1/namespaces/nowhere/pods", body)
    assert status == 404
    assert "nowhere" in body_out["message"]


async def test_create_of_an_existing_name_is_409_already_exists(raw: Raw, fake_kube: FakeKube) -> None:
    fake_kube.add_pod("p")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    status, out, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", body)
    assert status == 409
    assert out["reason"] == "AlreadyExists"


async def test_created_objects_get_uid_and_resource_version(raw: Raw) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "p-"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    status, out, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", body)
    assert status == 201
    assert out["metadata"]["uid"] and out["metadata"]["resourceVersion"]
    assert out["metadata"]["name"].startswith("p-") and len(out["metadata"]["name"]) > 2


async def test_event_namespace_must_match_the_involved_object(raw: Raw) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e1"},
        "reason": "R",
        "message": "m",
        "type": "Warning",
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "kube-system"},
    }
    status, _, _ = await raw.request("POST", "/api/v1/namespaces/default/events", event)
    assert status == 422


async def test_extended_resource_requests_must_equal_limits(raw: Raw) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]
        },
    }
    status, _, _ = await raw.request("POST", "/api/v1/namespaces/default/pods", body)
    assert status == 422


def test_nodes_only_take_loopback_addresses(fake_kube: FakeKube) -> None:
    with pytest.raises(ValueError, match="loopback"):
        fake_kube.add_node("n1", ip="10.0.0.1")
    assert fake_kube.add_node("n2")["status"]["addresses"][0]["address"].startswith("127.0.0.")


async def test_managed_fields_kept_as_an_apiserver_keeps_them_for_updates() -> None:
    """The manager is the fieldManager parameter, else the User-Agent's product; a write takes the fields it set
    from every other manager; a field removed is owned by no one; atomic spec.taints is one field."""
    import httpx

    from tests.fakekube.managed_fields import owned_paths
    from tests.fakekube.server import FakeKube

    async with FakeKube() as fake:
        fake.add_node("n1")
        async with httpx.AsyncClient(base_url=fake.url) as client:
            async def patch(body: object, manager: str | None, kind: str = "strategic-merge-patch+json") -> dict:
                r = await client.patch("/api/v1/nodes/n1", params={"fieldManager": manager} if manager else {},
                                       json=body, headers={"Content-Type": f"application/{kind}",
                                                           "User-Agent": "kubectl/v1.31.2 (linux/amd64)"})
                assert r.status_code == 200, r.text
                return dict(r.json())

            def owners(obj: dict) -> dict[str, set]:
                return {e["manager"]: owned_paths(e["fieldsV1"]) for e in obj["metadata"].get("managedFields", [])}

            taint = {"key": "a", "value": "", "effect": "NoSchedule"}
            obj = await patch({"spec": {"unschedulable": True, "taints": [taint]},
                               "metadata": {"labels": {"x": "1"}}}, "remediator")
            assert owners(obj) == {"remediator": {("f:spec", "f:unschedulable"), ("f:spec", "f:taints"),
                                                  ("f:metadata", "f:labels", "f:x")}}
            entry = obj["metadata"]["managedFields"][0]
            assert (entry["operation"], entry["apiVersion"], entry["fieldsType"]) == ("Update", "v1", "FieldsV1")
            assert entry["time"]
            obj = await patch({"spec": {"unschedulable": False}}, "kubectl-patch")
            assert owners(obj)["kubectl-patch"] == {("f:spec", "f:unschedulable")}
            assert ("f:spec", "f:unschedulable") not in owners(obj)["remediator"]
            obj = await patch([{"op": "remove", "path": "/spec/taints"}], None, "json-patch+json")
            assert "kubectl" not in owners(obj)  # a removal gives its writer nothing
            assert owners(obj)["remediator"] == {("f:metadata", "f:labels", "f:x")}
            obj = await patch({"metadata": {"managedFields": [{"manager": "forged"}]}}, "x")
            assert "forged" not in owners(obj)  # the server's, never a client's

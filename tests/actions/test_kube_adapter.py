"""KubeAdapter: typed calls over real HTTP, every failure translated into remediator.errors, and connect()."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from kubernetes.aio import client

from remediator.adapters.kube import KubeAdapter, connect, with_session_options
from remediator.errors import (
    ConfigError,
    Conflict,
    Invalid,
    NotFound,
    NotSupported,
    ServiceUnavailable,
    TooManyRequests,
)
from remediator.settings import Settings
from tests.fakekube import Call, FakeKube


async def test_get_of_a_missing_node_is_not_found(kube_adapter: KubeAdapter) -> None:
    with pytest.raises(NotFound) as caught:
        await kube_adapter.get_node("ghost")
    assert caught.value.status == 404
    assert "ghost" in caught.value.message


async def test_invalid_patch_is_invalid(fake_kube: FakeKube, kube_adapter: KubeAdapter) -> None:
    fake_kube.add_node("n1")
    with pytest.raises(Invalid):
        await kube_adapter.patch_node("n1", {"metadata": {"labels": {"k": "not valid!"}}})


async def test_stale_write_is_conflict(fake_kube: FakeKube, kube_adapter: KubeAdapter) -> None:
    fake_kube.add_node("n1")
    with pytest.raises(Conflict):
        await kube_adapter.patch_node(
            "n1", {"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": True}}
        )


async def test_429_carries_retry_after(fake_kube: FakeKube, kube_adapter: KubeAdapter) -> None:
    fake_kube.add_node("n1")
    fake_kube.fail("get", "nodes", 429, retry_after=3)
    with pytest.raises(TooManyRequests) as caught:
        await kube_adapter.get_node("n1")
    assert caught.value.retry_after == 3.0


async def test_5xx_is_service_unavailable(fake_kube: FakeKube, kube_adapter: KubeAdapter) -> None:
    fake_kube.add_node("n1")
    fake_kube.fail("list", "pods", 500)
    with pytest.raises(ServiceUnavailable):
        await kube_adapter.list_pods_on_node("n1")


async def test_refused_connection_is_service_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    adapter = KubeAdapter.for_host(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(ServiceUnavailable):
            await adapter.get_node("n1")
    finally:
        await adapter.close()


async def test_patches_use_strategic_merge_and_the_field_manager(
    fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    fake_kube.add_node("n1")
    await kube_adapter.patch_node("n1", {"spec": {"unschedulable": True}})
    (call,) = fake_kube.requests("patch", "nodes")
    assert call.content_type == "application/strategic-merge-patch+json"
    assert call.params["fieldManager"] == "remediator"


async def test_list_pods_filters_on_the_server(fake_kube: FakeKube, kube_adapter: KubeAdapter) -> None:
    fake_kube.add_pod("here", node="n1")
    fake_kube.add_pod("there", node="n2", labels={"app": "x"})
    assert [p["metadata"]["name"] for p in await kube_adapter.list_pods_on_node("n1")] == ["here"]
    by_label = await kube_adapter.list_pods("default", label_selector="app=x")
    assert [p["metadata"]["name"] for p in by_label] == ["there"]
    (call,) = fake_kube.requests("list", "pods", namespace="default")
    assert call.params["labelSelector"] == "app=x"


async def test_namespaced_objects_read_and_patch(fake_kube: FakeKube, kube_adapter: KubeAdapter) -> None:
    fake_kube.add_deployment("web", replicas=3)
    fake_kube.add_job("batch")
    fake_kube.add_resource_quota("gpus", "default", {"requests.nvidia.com/gpu": "8"})
    await kube_adapter.patch_job("default", "batch", {"spec": {"suspend": True}})
    await kube_adapter.patch_resource_quota(
        "default", "gpus", {"spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}
    )
    assert (await kube_adapter.get_deployment("default", "web"))["spec"]["replicas"] == 3
    assert (await kube_adapter.get_job("default", "batch"))["spec"]["suspend"] is True
    quota = await kube_adapter.get_resource_quota("default", "gpus")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "0"}
    assert [q["metadata"]["name"] for q in await kube_adapter.list_resource_quotas("default")] == ["gpus"]


async def test_a_write_the_kind_table_does_not_grant_is_refused_unsent(
    fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    fake_kube.add_deployment("web", replicas=3)
    with pytest.raises(NotSupported, match="patch on deployments"):
        await kube_adapter.patch_object("Deployment", "default", "web", {"spec": {"replicas": 0}})
    with pytest.raises(NotSupported, match="patch on cronjobs/scale"):
        await kube_adapter.patch_scale("CronJob", "default", "web", 0)
    assert fake_kube.requests("patch", "deployments") == [] and fake_kube.requests("patch", "cronjobs") == []


async def test_namespaces_read(fake_kube: FakeKube, kube_adapter: KubeAdapter) -> None:
    fake_kube.add_namespace("ml", labels={"remediator.io/exclude": "true"})
    assert (await kube_adapter.get_namespace("ml"))["metadata"]["labels"]["remediator.io/exclude"] == "true"


async def test_owner_of_an_unknown_kind_is_not_supported(kube_adapter: KubeAdapter) -> None:
    with pytest.raises(NotSupported):
        await kube_adapter.get_owner("default", {"kind": "MPIJob", "name": "x"})


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "tester", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
                "current-context": "fake",
            }
        )
    )
    return path


async def _read_a_node_through_connect(fake_kube: FakeKube, tmp_path: Path) -> Call:
    """Read node n1 with an adapter `connect()` builds from a kubeconfig; the fake's record of that request."""
    fake_kube.add_node("n1")
    adapter = await connect(Settings(kubeconfig=str(write_kubeconfig(tmp_path / "config", fake_kube.url))))
    assert adapter is not None
    try:
        assert (await adapter.get_node("n1"))["metadata"]["name"] == "n1"
    finally:
        await adapter.close()
    (call,) = fake_kube.requests("get", "nodes")
    return call


async def test_connect_uses_the_configured_kubeconfig(fake_kube: FakeKube, tmp_path: Path) -> None:
    call = await _read_a_node_through_connect(fake_kube, tmp_path)
    assert call.path == "/api/v1/nodes/n1"


async def test_a_netrc_entry_for_the_api_server_is_not_used(
    fake_kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials come from the kubeconfig; aiohttp's netrc lookup (trust_env) would add basic auth beside
    the bearer token and refuse every request. Without a proxy variable the environment is not consulted."""
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    call = await _read_a_node_through_connect(fake_kube, tmp_path)
    assert call.ok


def test_the_environment_is_trusted_when_it_names_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert with_session_options(client.Configuration()).client_session_kwargs == {"trust_env": False}
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert with_session_options(client.Configuration()).client_session_kwargs == {"trust_env": True}


async def test_connect_without_credentials_returns_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert await connect(Settings(kubeconfig=None)) is None


async def test_connect_with_a_broken_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "config"
    broken.write_text("current-context: nowhere\n")
    with pytest.raises(ConfigError):
        await connect(Settings(kubeconfig=str(broken)))

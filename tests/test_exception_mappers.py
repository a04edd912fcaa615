"""Each adapter's `map_exceptions`: its library's exception in, the project's class out, the message kept.

Kubernetes (kubernetes ApiException, aiohttp and OS errors), the node agent client, Slack and the webhooks
(httpx), and the command line's controller API client (httpx). The database's classifier is tested in
tests/store (store/availability.py).
"""

from __future__ import annotations

import aiohttp
import httpx
import pytest
from kubernetes.aio.client.exceptions import ApiException

from remediator.adapters import controller_api, kube, notifier, sidecar
from remediator.adapters.controller_api import ControllerApi
from remediator.adapters.kube import KubeAdapter
from remediator.adapters.sidecar import SidecarClient
from remediator.errors import (
    ControllerApiError,
    Forbidden,
    NotificationFailed,
    RemediatorError,
    ServiceUnavailable,
)
from remediator.retrying import is_transient
from remediator.settings import Settings

# ---------------------------------------------------------------- Kubernetes


def test_kube_transport_error_becomes_service_unavailable_naming_the_api() -> None:
    cause = aiohttp.ClientConnectionError("connection refused by 10.0.0.1:6443")
    with pytest.raises(ServiceUnavailable) as caught, kube.map_exceptions("cannot reach the Kubernetes API"):
        raise cause
    error = caught.value
    assert "cannot reach the Kubernetes API" in error.message
    assert "connection refused by 10.0.0.1:6443" in error.message
    assert error.dependency == "kubernetes API" and is_transient(error)
    assert error.__cause__ is cause


@pytest.mark.parametrize("raised", [TimeoutError("read timed out"), ConnectionResetError("reset by peer")])
def test_kube_timeouts_and_os_errors_are_transient(raised: BaseException) -> None:
    with pytest.raises(ServiceUnavailable) as caught, kube.map_exceptions("node watch interrupted"):
        raise raised
    assert str(raised) in caught.value.message and caught.value.message.startswith("node watch interrupted")


def test_kube_client_api_exception_takes_the_class_of_its_status() -> None:
    with pytest.raises(Forbidden) as caught, kube.map_exceptions("unused"):
        raise ApiException(status=403, reason="no token for this verb")
    assert caught.value.message == "kubernetes client: no token for this verb"
    assert caught.value.status == 403 and not caught.value.retryable

    with pytest.raises(ServiceUnavailable) as unavailable, kube.map_exceptions("unused"):
        raise ApiException(status=503, reason="apiserver starting")
    assert unavailable.value.dependency == "kubernetes API"


def test_kube_mapper_lets_the_projects_errors_and_others_through() -> None:
    with pytest.raises(Forbidden), kube.map_exceptions("unused"):
        raise Forbidden("already classified")
    with pytest.raises(KeyError), kube.map_exceptions("unused"):
        raise KeyError("a bug stays a bug")


async def test_kube_adapter_unreachable_server_raises_service_unavailable() -> None:
    adapter = KubeAdapter.for_host("http://127.0.0.1:9")  # discard port: nothing listens
    try:
        with pytest.raises(ServiceUnavailable) as caught:
            await adapter.get_node("gpu-node-1")
    finally:
        await adapter.close()
    assert caught.value.message.startswith("cannot reach the Kubernetes API")
    assert caught.value.dependency == "kubernetes API"


# ---------------------------------------------------------------- the node agent


def test_sidecar_connection_never_made_is_unsent() -> None:
    url = "http://10.0.0.7:9555/v1/gpus"
    with pytest.raises(ServiceUnavailable) as caught, sidecar.map_exceptions(url):
        raise httpx.ConnectError("connection refused")
    error = caught.value
    assert error.message == f"sidecar {url} unreachable: ConnectError('connection refused')"
    assert error.details == {"sent": False} and error.dependency == "node agent"
    assert isinstance(error.__cause__, httpx.ConnectError)


def test_sidecar_failure_mid_request_may_have_been_sent() -> None:
    with pytest.raises(ServiceUnavailable) as caught, sidecar.map_exceptions("http://10.0.0.7:9555/v1/reset"):
        raise httpx.ReadTimeout("timed out reading")
    assert "failed mid-request" in caught.value.message and "timed out reading" in caught.value.message
    assert caught.value.details == {"sent": True}


async def test_sidecar_client_maps_a_refused_connection() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = SidecarClient(Settings(sidecar_port=9555), httpx.AsyncClient(transport=httpx.MockTransport(refuse)),
                           attempts=2, backoff_seconds=0)
    with pytest.raises(ServiceUnavailable) as caught:
        await client.gpus("10.0.0.7")
    assert "connection refused" in caught.value.message and caught.value.dependency == "node agent"


# ---------------------------------------------------------------- Slack and webhooks


def test_notifier_transport_error_becomes_a_transient_notification_failure() -> None:
    with pytest.raises(NotificationFailed) as caught, notifier.map_exceptions("slack", "chat.postMessage: "):
        raise httpx.ConnectTimeout("connect timed out")
    error = caught.value
    assert error.channel == "slack"
    assert error.reason == "chat.postMessage: ConnectTimeout: connect timed out"
    assert error.retryable
    assert isinstance(error.__cause__, httpx.ConnectTimeout)


async def test_webhook_post_maps_a_refused_connection() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no route to host", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as http:
        with pytest.raises(NotificationFailed) as caught:
            await notifier._post_json(http, "http://hooks.invalid/x", {"text": "hi"}, "webhook")
    assert caught.value.reason == "ConnectError: no route to host" and caught.value.retryable


# ---------------------------------------------------------------- the controller API (command line)


def test_controller_api_unreachable_keeps_httpx_message_without_a_status() -> None:
    with pytest.raises(ControllerApiError) as caught, controller_api.map_exceptions("http://ctl:8080"):
        raise httpx.ConnectError("connection refused")
    assert caught.value.status is None
    assert caught.value.message == "cannot reach the controller at http://ctl:8080: connection refused"
    assert caught.value.__suppress_context__  # one line on the command line, no httpx traceback


def test_controller_api_empty_message_names_the_httpx_class() -> None:
    with pytest.raises(ControllerApiError) as caught, controller_api.map_exceptions("http://ctl:8080"):
        raise httpx.RemoteProtocolError("")
    assert caught.value.message.endswith(": RemoteProtocolError")


def test_controller_api_bad_address() -> None:
    with pytest.raises(ControllerApiError) as caught, controller_api.map_exceptions("ht!tp://"):
        raise httpx.InvalidURL("Invalid URL component")
    assert caught.value.message == "invalid server address 'ht!tp://': Invalid URL component"


def test_controller_api_client_maps_a_refused_connection() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    api = ControllerApi("http://ctl:8080", None, transport=httpx.MockTransport(refuse))
    with api, pytest.raises(ControllerApiError) as caught:
        api.get("/api/v1/remediations")
    assert caught.value.message == "cannot reach the controller at http://ctl:8080: connection refused"


# ---------------------------------------------------------------- the classes are the project's


@pytest.mark.parametrize("cls", [ControllerApiError, NotificationFailed, ServiceUnavailable])
def test_mapped_classes_are_under_the_root(cls: type[Exception]) -> None:
    assert issubclass(cls, RemediatorError)

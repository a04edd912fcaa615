"""SidecarClient: addressing, auth header, retries on 5xx and connection errors only, error mapping."""

from __future__ import annotations

import httpx
import pytest

from remediator.adapters.sidecar import SidecarClient
from remediator.errors import Conflict, Invalid, NotFound, NotSupported, ServiceUnavailable, Unauthorized
from remediator.settings import Settings

UUID = "GPU-12345678-1111-2222-3333-444455556666"


def make(handler: httpx.MockTransport, attempts: int = 3) -> SidecarClient:
    settings = Settings(sidecar_token="tok", sidecar_port=9555)
    return SidecarClient(settings, httpx.AsyncClient(transport=handler), attempts=attempts, backoff_seconds=0)


async def test_address_token_and_body() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"changed": True, "previous_watts": 700.0, "new_watts": 350.0})

    client = make(httpx.MockTransport(handle))
    answer = await client.set_power_limit("127.0.0.7", UUID, percent_of_default=50, dry_run=True)
    assert answer.new_watts == 350.0
    request = seen[0]
    assert str(request.url) == f"http://127.0.0.7:9555/v1/gpus/{UUID}/power-limit"
    assert request.headers["authorization"] == "Bearer tok"
    assert request.content == b'{"dry_run":true,"percent_of_default":50}'
    assert client.base_url("::1") == "http://[::1]:9555"


async def test_retries_5xx_then_succeeds() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            return httpx.Response(503, json={"error": "NVML not ready", "nvml_error": "NOT_READY"})
        return httpx.Response(200, json={"gpus": []})

    assert (await make(httpx.MockTransport(handle)).gpus("127.0.0.1")).gpus == []
    assert calls == 3


async def test_gives_up_after_attempts_with_service_unavailable() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(502, json={"error": "device said no", "nvml_error": "UNKNOWN"})

    with pytest.raises(ServiceUnavailable) as caught:
        await make(httpx.MockTransport(handle), attempts=4).gpus("127.0.0.1")
    assert calls == 4
    assert caught.value.details["nvml_error"] == "UNKNOWN"


async def test_retries_connection_errors() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"gpus": []})

    await make(httpx.MockTransport(handle)).gpus("127.0.0.1")
    assert calls == 2


async def test_real_refused_connection_is_service_unavailable() -> None:
    settings = Settings(sidecar_token="tok", sidecar_port=1)
    async with httpx.AsyncClient() as http:
        client = SidecarClient(settings, http, attempts=2, backoff_seconds=0)
        with pytest.raises(ServiceUnavailable):
            await client.gpus("127.0.0.1")


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, Unauthorized), (404, NotFound), (410, NotFound), (422, Invalid), (501, NotSupported)],
)
async def test_4xx_and_501_are_not_retried(status: int, error: type[Exception]) -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(status, json={"error": "no", "nvml_error": None})

    with pytest.raises(error):
        await make(httpx.MockTransport(handle)).restore_power_limit("127.0.0.1", UUID)
    assert calls == 1


async def test_409_keeps_the_process_list() -> None:
    processes = [{"pid": 7, "used_memory_bytes": 1, "pod_uid": "u", "container_id": None}]

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"error": "in use", "nvml_error": None, "processes": processes})

    with pytest.raises(Conflict) as caught:
        await make(httpx.MockTransport(handle)).reset("127.0.0.1", UUID)
    assert caught.value.details["processes"] == processes


async def test_reset_is_not_retried_once_sent() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(500, json={"error": "boom"})

    with pytest.raises(ServiceUnavailable):
        await make(httpx.MockTransport(handle)).reset("127.0.0.1", UUID)
    assert calls == 1


async def test_reset_is_retried_when_never_sent() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"changed": True, "healthy": True})

    assert (await make(httpx.MockTransport(handle)).reset("127.0.0.1", UUID)).healthy is True
    assert calls == 2


async def test_exactly_one_power_argument() -> None:
    client = make(httpx.MockTransport(lambda r: httpx.Response(200, json={})))
    with pytest.raises(ValueError):
        await client.set_power_limit("127.0.0.1", UUID)
    with pytest.raises(ValueError):
        await client.set_power_limit("127.0.0.1", UUID, watts=1, percent_of_default=1)


async def test_transient_failures_name_the_node_agent_and_carry_retry_after() -> None:
    """The one classification of this client: 429/5xx and unreachable agents are transient, name the node agent
    as the dependency a remediation waits for, and keep the agent's Retry-After; a 4xx is permanent."""

    def busy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": "4"}, json={"error": "busy"})

    with pytest.raises(ServiceUnavailable) as caught:
        await make(httpx.MockTransport(busy), attempts=1).gpus("127.0.0.1")
    assert caught.value.dependency == "node agent" and caught.value.retry_after == 4.0

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ServiceUnavailable) as down:
        await make(httpx.MockTransport(refused), attempts=1).gpus("127.0.0.1")
    assert down.value.dependency == "node agent" and down.value.status is None

    def missing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": "no such GPU"})

    with pytest.raises(NotFound) as gone:
        await make(httpx.MockTransport(missing), attempts=1).gpus("127.0.0.1")
    assert getattr(gone.value, "dependency", None) is None

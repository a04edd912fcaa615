"""SidecarClient refuses a GPU UUID or node address that would change the URL, before sending anything."""

from __future__ import annotations

import httpx
import pytest

from remediator.adapters.sidecar import SidecarClient
from remediator.errors import Invalid
from remediator.settings import Settings

UUID = "GPU-12345678-1111-2222-3333-444455556666"


def recording() -> tuple[SidecarClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"changed": False, "healthy": True, "pods": []})

    settings = Settings(sidecar_token="tok", sidecar_port=9555)
    client = SidecarClient(settings, httpx.AsyncClient(transport=httpx.MockTransport(handle)), backoff_seconds=0)
    return client, seen


@pytest.mark.parametrize("uuid", [".", "..", "a/b", "../../v1/gpus", "GPU-1/../x", "GPU-zz", ""])
async def test_a_bad_gpu_uuid_never_becomes_a_path(uuid: str) -> None:
    client, seen = recording()
    for call in (
        client.reset("127.0.0.7", uuid),
        client.set_power_limit("127.0.0.7", uuid, watts=300),
        client.restore_power_limit("127.0.0.7", uuid),
        client.gpu_pods("127.0.0.7", uuid),
    ):
        with pytest.raises(Invalid) as caught:
            await call
        assert "GPU or MIG UUID" in caught.value.message
    assert seen == []


@pytest.mark.parametrize("ip", ["evil.example/x?", "127.0.0.7/v1", "user@127.0.0.7", "..", ""])
async def test_a_node_address_that_is_not_an_ip_is_refused(ip: str) -> None:
    client, seen = recording()
    with pytest.raises(Invalid):
        await client.gpus(ip)
    assert seen == []


async def test_valid_uuids_and_addresses_still_pass() -> None:
    client, seen = recording()
    await client.reset("127.0.0.7", UUID)
    await client.gpu_pods("::1", "MIG-0000abcd-aaaa-bbbb-cccc-000000000001")
    await client.gpu_pods("127.0.0.7", UUID, gpu_instance=5)
    assert [str(r.url) for r in seen] == [
        f"http://127.0.0.7:9555/v1/gpus/{UUID}/reset",
        "http://[::1]:9555/v1/gpus/MIG-0000abcd-aaaa-bbbb-cccc-000000000001/pods",
        f"http://127.0.0.7:9555/v1/gpus/{UUID}/pods?gpu_instance=5",
    ]

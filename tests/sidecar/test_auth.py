"""Bearer token on every route of /v1, strict UUID path values, nothing changed on refusal."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.sidecar.conftest import SidecarEnv
from tests.sidecar.fakenvml import gpu_uuid

MUTATIONS = [
    ("/power-limit", {"watts": 300}),
    ("/power-limit/restore", None),
    ("/reset", None),
]


@pytest.mark.parametrize(("suffix", "body"), MUTATIONS)
@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "Basic c2lkZWNhci10ZXN0LXRva2Vu", "Bearer"])
def test_mutation_without_token_is_401_and_changes_nothing(
    env: SidecarEnv, suffix: str, body: dict | None, header: str | None
) -> None:
    # A remembered original makes restore a real change if it were allowed through.
    env.nvml.set("gpu.0.power_limit", 400_000)
    env.state_file.parent.mkdir(parents=True, exist_ok=True)
    env.state_file.write_text(json.dumps({"original_power_limit_mw": {gpu_uuid(0): 700000}}))
    before_nvml, before_state = env.nvml.read(), env.state_file.read_text()
    headers = {"Authorization": header} if header else {}
    response = httpx.post(f"{env.url}/v1/gpus/{gpu_uuid(0)}{suffix}", json=body, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "token" in response.json()["error"]
    assert env.nvml.read() == before_nvml
    assert env.state_file.read_text() == before_state


def test_reads_need_the_token_when_one_is_set(env: SidecarEnv) -> None:
    assert httpx.get(f"{env.url}/v1/gpus").status_code == 401
    assert httpx.get(f"{env.url}/v1/gpus/{gpu_uuid(0)}/pods").status_code == 401
    assert httpx.get(f"{env.url}/healthz").status_code == 200


def test_unauthenticated_bad_uuid_is_still_401(env: SidecarEnv) -> None:
    assert httpx.post(f"{env.url}/v1/gpus/not-a-uuid/reset").status_code == 401


@pytest.mark.parametrize(
    "uuid",
    [
        "0",
        "not-a-uuid",
        "GPU-",
        "GPU-zzzzzzzz-1111",
        "GPU-1234",
        "gpu-12345678-1111",
        "GPU-12345678;rm",
        "MIG-" + "a" * 70,
    ],
)
def test_bad_uuid_is_422(http: httpx.Client, env: SidecarEnv, uuid: str) -> None:
    for method, suffix in (("GET", "/pods"), ("POST", "/reset"), ("POST", "/power-limit/restore")):
        response = http.request(method, f"/v1/gpus/{uuid}{suffix}")
        assert response.status_code == 422, (method, suffix)
        assert "UUID" in response.json()["error"]
    assert env.nvml.calls("nvmlDeviceModifyDrainState") == 0

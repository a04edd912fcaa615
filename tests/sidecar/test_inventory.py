"""GET /v1/gpus, /healthz and /metrics against the fake NVML through the real pynvml bindings."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.sidecar.conftest import AUTH, SidecarEnv, running_env
from tests.sidecar.fakenvml import gpu_uuid, mig_uuid


def test_inventory_fields(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.1.ecc.volatile.corrected", 3)
    env.nvml.set("gpu.1.ecc.aggregate.uncorrected", 2)
    env.nvml.set("gpu.1.remap.correctable", 4)
    env.nvml.set("gpu.1.remap.pending", 1)
    env.nvml.set("gpu.1.procs", "4242:2147483648")
    env.nvml.set("gpu.1.power_usage", 512_345)

    body = http.get("/v1/gpus").json()

    assert body["driver_version"] == "580.159.04"
    assert body["nvml_version"] == "13.580.159.04"
    assert [g["index"] for g in body["gpus"]] == [0, 1]
    gpu = body["gpus"][1]
    assert gpu["uuid"] == gpu_uuid(1)
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["pci_bus_id"] == "00000000:19:00.0"
    assert (gpu["temperature_c"], gpu["temperature_slowdown_c"], gpu["temperature_shutdown_c"]) == (
        35,
        89,
        95,
    )
    assert gpu["power_draw_watts"] == 512.345
    assert gpu["power_limit_watts"] == 700.0
    assert gpu["power_limit_default_watts"] == 700.0
    assert (gpu["power_limit_min_watts"], gpu["power_limit_max_watts"]) == (200.0, 700.0)
    assert gpu["power_limit_original_watts"] is None
    assert gpu["ecc"] == {
        "enabled": True,
        "pending": True,
        "volatile": {"corrected": 3, "uncorrected": 0},
        "aggregate": {"corrected": 0, "uncorrected": 2},
    }
    assert gpu["remapped_rows"] == {"correctable": 4, "uncorrectable": 0, "pending": True, "failure": False}
    assert gpu["mig"] == {"current": False, "pending": False, "devices": []}
    assert gpu["processes"] == [{"pid": 4242, "used_memory_bytes": 2147483648}]


def test_not_supported_fields_become_null_with_a_note(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("err.nvmlDeviceGetRemappedRows.0", 3)
    gpu = http.get("/v1/gpus").json()["gpus"][0]
    assert gpu["retired_pages"] is None
    assert "NOT_SUPPORTED" in gpu["notes"]["retired_pages"]
    assert gpu["remapped_rows"] is None
    assert "NOT_SUPPORTED" in gpu["notes"]["remapped_rows"]
    assert gpu["temperature_c"] == 34


def test_mig_devices_are_listed(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.0.mig_mode", 1)
    env.nvml.set("gpu.0.mig.count", 2)
    env.nvml.set("gpu.0.mig.0.uuid", mig_uuid(0, 0))
    env.nvml.set("gpu.0.mig.1.uuid", mig_uuid(0, 1))
    gpu = http.get("/v1/gpus").json()["gpus"][0]
    assert gpu["mig"] == {"current": True, "pending": True, "devices": [mig_uuid(0, 0), mig_uuid(0, 1)]}


def test_not_supported_on_a_required_call_is_501(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("err.nvmlDeviceGetPowerManagementLimit", 3)
    response = http.post(f"/v1/gpus/{gpu_uuid(0)}/power-limit", json={"watts": 500})
    assert response.status_code == 501
    assert response.json()["nvml_error"] == "NOT_SUPPORTED"
    assert env.nvml.calls("nvmlDeviceSetPowerManagementLimit") == 0


def test_lost_gpu_is_410_and_no_permission_is_403(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("err.nvmlDeviceGetPowerManagementLimit.0", 15)
    lost = http.post(f"/v1/gpus/{gpu_uuid(0)}/power-limit", json={"watts": 500})
    assert (lost.status_code, lost.json()["nvml_error"]) == (410, "GPU_IS_LOST")
    env.nvml.set("err.nvmlDeviceSetPowerManagementLimit", 4)
    denied = http.post(f"/v1/gpus/{gpu_uuid(1)}/power-limit", json={"watts": 500})
    assert (denied.status_code, denied.json()["nvml_error"]) == (403, "NO_PERMISSION")


def test_a_failing_gpu_does_not_hide_the_others(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("err.nvmlDeviceGetName.0", 15)
    gpus = http.get("/v1/gpus").json()["gpus"]
    assert gpus[0]["nvml_error"] == "GPU_IS_LOST"
    assert gpus[1]["uuid"] == gpu_uuid(1)


def test_unknown_uuid_is_404(http: httpx.Client) -> None:
    response = http.get("/v1/gpus/GPU-deadbeef-0000-0000-0000-000000000000")
    assert response.status_code == 404
    assert "no GPU" in response.json()["error"]


def test_healthz_and_metrics(env: SidecarEnv, http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok", "gpus": 2}
    env.nvml.set("err.nvmlDeviceGetRetiredPages", 3)
    http.get("/v1/gpus")
    text = httpx.get(env.url + "/metrics").text
    assert f'remediator_sidecar_gpu_temperature_celsius{{index="0",uuid="{gpu_uuid(0)}"}} 34.0' in text
    assert f'remediator_sidecar_gpu_power_limit_watts{{index="1",uuid="{gpu_uuid(1)}"}} 700.0' in text
    assert 'remediator_sidecar_requests_total{method="GET",route="/v1/gpus",status="200"}' in text
    assert (
        'remediator_sidecar_nvml_errors_total{error="NOT_SUPPORTED",function="nvmlDeviceGetRetiredPages"}'
        in text
    )


def test_healthz_is_503_when_nvml_cannot_start(tmp_path: Path, fake_nvml_dir: Path) -> None:
    with running_env(tmp_path / "broken", fake_nvml_dir) as env:
        env.nvml.set("err.nvmlInitWithFlags", 9)  # DRIVER_NOT_LOADED, from now on
        env.sidecar.stop()
        env.sidecar.start()
        health = httpx.get(env.url + "/healthz")
        assert health.status_code == 503
        assert health.json()["nvml_error"] == "DRIVER_NOT_LOADED"
        gpus = httpx.get(env.url + "/v1/gpus", headers=AUTH)
        assert gpus.status_code == 503
        env.nvml.set("err.nvmlInitWithFlags", 0)
        assert httpx.get(env.url + "/healthz").status_code == 200


def test_healthz_is_503_for_any_nvml_failure(env: SidecarEnv) -> None:
    """An NVML error the API routes answer 502 (unclassified) still makes /healthz 503, as documented."""
    env.nvml.set("err.nvmlDeviceGetCount_v2", 999)  # NVML_ERROR_UNKNOWN
    try:
        health = httpx.get(env.url + "/healthz")
        assert health.status_code == 503
        assert health.json()["nvml_error"] == "UNKNOWN"
        env.nvml.set("err.nvmlDeviceGetCount_v2", 17)  # OPERATING_SYSTEM
        assert httpx.get(env.url + "/healthz").status_code == 503
    finally:
        env.nvml.set("err.nvmlDeviceGetCount_v2", 0)
    assert httpx.get(env.url + "/healthz").json() == {"status": "ok", "gpus": 2}

"""Power limit set/restore: validation, the remembered original, idempotency, restart safety."""

from __future__ import annotations

import json

import httpx

from tests.sidecar.conftest import SidecarEnv
from tests.sidecar.fakenvml import gpu_uuid

SET = "nvmlDeviceSetPowerManagementLimit"


def test_percent_of_default_then_restore(env: SidecarEnv, http: httpx.Client) -> None:
    url = f"/v1/gpus/{gpu_uuid(0)}/power-limit"
    body = http.post(url, json={"percent_of_default": 50}).json()
    assert body["changed"] is True
    assert (body["previous_watts"], body["new_watts"], body["original_watts"]) == (700.0, 350.0, 700.0)
    assert env.nvml.get("gpu.0.power_limit") == "350000"
    assert json.loads(env.state_file.read_text()) == {
        "original_power_limit_mw": {gpu_uuid(0): 700000},
        "set_power_limit_mw": {gpu_uuid(0): 350000},
    }
    assert http.get("/v1/gpus").json()["gpus"][0]["power_limit_original_watts"] == 700.0

    # A second change keeps the first original.
    second = http.post(url, json={"watts": 400}).json()
    assert (second["previous_watts"], second["new_watts"], second["original_watts"]) == (350.0, 400.0, 700.0)

    restored = http.post(url + "/restore").json()
    assert restored["changed"] is True and restored["restored"] is True
    assert (restored["previous_watts"], restored["new_watts"]) == (400.0, 700.0)
    assert env.nvml.get("gpu.0.power_limit") == "700000"
    assert json.loads(env.state_file.read_text()) == {"original_power_limit_mw": {}, "set_power_limit_mw": {}}

    again = http.post(url + "/restore").json()
    assert again["changed"] is False
    assert "nothing to restore" in again["message"]
    assert env.nvml.calls(SET) == 3


def test_same_value_twice_changes_nothing(env: SidecarEnv, http: httpx.Client) -> None:
    url = f"/v1/gpus/{gpu_uuid(1)}/power-limit"
    assert http.post(url, json={"watts": 450}).json()["changed"] is True
    second = http.post(url, json={"watts": 450}).json()
    assert second["changed"] is False
    assert "nothing changed" in second["message"]
    assert env.nvml.calls(SET) == 1


def test_setting_the_current_value_remembers_nothing(env: SidecarEnv, http: httpx.Client) -> None:
    body = http.post(f"/v1/gpus/{gpu_uuid(0)}/power-limit", json={"watts": 700}).json()
    assert body["changed"] is False
    assert not env.state_file.exists()
    assert env.nvml.calls(SET) == 0


def test_out_of_range_is_422_naming_the_range(env: SidecarEnv, http: httpx.Client) -> None:
    response = http.post(f"/v1/gpus/{gpu_uuid(0)}/power-limit", json={"watts": 150})
    assert response.status_code == 422
    body = response.json()
    assert "200-700 W" in body["error"]
    assert (body["min_watts"], body["max_watts"]) == (200.0, 700.0)
    too_high = http.post(f"/v1/gpus/{gpu_uuid(0)}/power-limit", json={"percent_of_default": 120})
    assert too_high.status_code == 422
    assert "840 W" in too_high.json()["error"]
    assert env.nvml.calls(SET) == 0
    assert not env.state_file.exists()


def test_body_validation(http: httpx.Client) -> None:
    url = f"/v1/gpus/{gpu_uuid(0)}/power-limit"
    assert http.post(url, json={}).status_code == 422
    assert http.post(url, json={"watts": 300, "percent_of_default": 50}).status_code == 422
    assert http.post(url, json={"watts": -5}).status_code == 422
    assert http.post(url, json={"watts": 300, "colour": "red"}).status_code == 422


def test_dry_run_changes_nothing(env: SidecarEnv, http: httpx.Client) -> None:
    body = http.post(f"/v1/gpus/{gpu_uuid(0)}/power-limit", json={"watts": 300, "dry_run": True}).json()
    assert body["dry_run"] is True
    assert (body["previous_watts"], body["new_watts"]) == (700.0, 300.0)
    assert "would set" in body["message"]
    assert env.nvml.get("gpu.0.power_limit") == "700000"
    assert not env.state_file.exists()
    assert env.nvml.calls(SET) == 0


def test_failed_set_forgets_the_original_it_just_wrote(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set(f"err.{SET}", 4)
    assert http.post(f"/v1/gpus/{gpu_uuid(0)}/power-limit", json={"watts": 300}).status_code == 403
    assert json.loads(env.state_file.read_text()) == {"original_power_limit_mw": {}, "set_power_limit_mw": {}}


def test_original_survives_a_sidecar_restart(env: SidecarEnv) -> None:
    from tests.sidecar.conftest import AUTH

    url = f"/v1/gpus/{gpu_uuid(1)}/power-limit"
    assert httpx.post(env.url + url, json={"watts": 300}, headers=AUTH).status_code == 200
    env.sidecar.stop()
    env.sidecar.start()
    restored = httpx.post(env.url + url + "/restore", headers=AUTH).json()
    assert (restored["previous_watts"], restored["new_watts"], restored["changed"]) == (300.0, 700.0, True)
    assert env.nvml.get("gpu.1.power_limit") == "700000"


def test_restore_leaves_a_limit_someone_else_set_after_the_cap(env: SidecarEnv, http: httpx.Client) -> None:
    url = f"/v1/gpus/{gpu_uuid(0)}/power-limit"
    assert http.post(url, json={"watts": 400}).json()["changed"] is True
    env.nvml.set("gpu.0.power_limit", 550_000)  # an operator's nvidia-smi -pl 550 after the cap

    dry = http.post(url + "/restore", json={"dry_run": True}).json()
    assert (dry["restored"], dry["left_alone"]) == (False, True)
    assert "would leave" in dry["message"]

    response = http.post(url + "/restore")
    assert response.status_code == 200
    body = response.json()
    assert body["restored"] is False and body["changed"] is False and body["left_alone"] is True
    assert body["reason"] == "changed by another actor"
    assert (body["current_watts"], body["capped_watts"], body["original_watts"]) == (550.0, 400.0, 700.0)
    assert "changed by another actor" in body["message"]
    assert env.nvml.get("gpu.0.power_limit") == "550000"
    assert env.nvml.calls(SET) == 1
    # The operator's limit is the baseline now: nothing is remembered, a second restore does nothing.
    assert json.loads(env.state_file.read_text()) == {"original_power_limit_mw": {}, "set_power_limit_mw": {}}
    again = http.post(url + "/restore").json()
    assert again["changed"] is False and "nothing to restore" in again["message"]
    assert env.nvml.get("gpu.0.power_limit") == "550000"


def test_restore_of_a_state_file_without_the_set_limit_restores_the_original(
    env: SidecarEnv, http: httpx.Client
) -> None:
    env.nvml.set("gpu.1.power_limit", 300_000)
    env.state_file.parent.mkdir(parents=True, exist_ok=True)
    env.state_file.write_text(json.dumps({"original_power_limit_mw": {gpu_uuid(1): 700000}}))
    body = http.post(f"/v1/gpus/{gpu_uuid(1)}/power-limit/restore").json()
    assert (body["restored"], body["changed"]) == (True, True)
    assert env.nvml.get("gpu.1.power_limit") == "700000"


def test_nan_and_infinity_in_the_body_are_a_clean_422_naming_the_field(env: SidecarEnv, http: httpx.Client) -> None:
    url = f"/v1/gpus/{gpu_uuid(0)}/power-limit"
    headers = {"Content-Type": "application/json"}
    for raw, field in [
        ('{"watts": NaN}', "watts"),
        ('{"watts": Infinity}', "watts"),
        ('{"percent_of_default": -Infinity}', "percent_of_default"),
        ('{"watts": 300, "dry_run": NaN}', "dry_run"),
    ]:
        response = http.post(url, content=raw, headers=headers)
        assert response.status_code == 422, (raw, response.text)
        body = response.json()
        assert body["error"].startswith(f"invalid request: {field}: "), body
        assert field in [e["field"] for e in body["errors"]]
    restore = http.post(url + "/restore", content='{"dry_run": NaN}', headers=headers)
    assert restore.status_code == 422 and "dry_run" in restore.json()["error"]
    assert env.nvml.calls(SET) == 0
    assert not env.state_file.exists()

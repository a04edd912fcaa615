"""GPU reset: refused while in use, NVML drain/remove/rediscover, nvidia-smi argv, post-check."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from tests.sidecar.conftest import SidecarEnv, running_env
from tests.sidecar.fakenvml import gpu_uuid

POD_UID = "0b5f9a7e-2d3c-4e1f-9a8b-7c6d5e4f3a2b"
MUTATIONS = ("nvmlDeviceModifyDrainState", "nvmlDeviceRemoveGpu_v2", "nvmlDeviceDiscoverGpus")


def test_reset_refused_with_processes(env: SidecarEnv, http: httpx.Client) -> None:
    env.add_process(0, 777, f"0::/kubepods/burstable/pod{POD_UID}/{'c' * 64}\n", used_bytes=4096)
    response = http.post(f"/v1/gpus/{gpu_uuid(0)}/reset")
    assert response.status_code == 409
    body = response.json()
    assert body["processes"] == [
        {"pid": 777, "used_memory_bytes": 4096, "pod_uid": POD_UID, "container_id": "c" * 64}
    ]
    assert "in use by 1 process" in body["error"]
    assert all(env.nvml.calls(fn) == 0 for fn in MUTATIONS)


def test_reset_through_nvml_and_post_check(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.0.ecc.volatile.uncorrected", 5)
    body = http.post(f"/v1/gpus/{gpu_uuid(0)}/reset").json()
    assert body["changed"] is True
    assert body["method"] == "nvml"
    assert body["healthy"] is True
    assert body["post_check"] == {
        "uuid": gpu_uuid(0),
        "found": True,
        "index": 0,
        "ecc_volatile_uncorrected": 0,
        "temperature_c": 34,
        "healthy": True,
        "problems": [],
    }
    assert [env.nvml.calls(fn) for fn in MUTATIONS] == [2, 1, 1]  # drain on, remove, rediscover, drain off
    assert env.nvml.get("gpu.0.drain") == "0"


def test_reset_post_check_reports_a_gpu_that_did_not_come_back(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.1.lost_after_reset", 1)
    body = http.post(f"/v1/gpus/{gpu_uuid(1)}/reset").json()
    assert body["healthy"] is False
    assert body["post_check"]["found"] is False
    assert "not found after reset" in body["message"]


def test_reset_post_check_reports_ecc_errors(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.1.ecc_after_reset", 2)
    body = http.post(f"/v1/gpus/{gpu_uuid(1)}/reset").json()
    assert body["healthy"] is False
    assert body["post_check"]["problems"] == ["2 volatile uncorrected ECC errors"]


def test_reset_dry_run_touches_nothing(env: SidecarEnv, http: httpx.Client) -> None:
    body = http.post(f"/v1/gpus/{gpu_uuid(0)}/reset", json={"dry_run": True}).json()
    assert (body["dry_run"], body["changed"]) == (True, False)
    assert all(env.nvml.calls(fn) == 0 for fn in MUTATIONS)


def test_reset_failure_lifts_the_drain(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("err.nvmlDeviceRemoveGpu_v2", 19)  # IN_USE
    response = http.post(f"/v1/gpus/{gpu_uuid(0)}/reset")
    assert response.status_code == 409
    assert response.json()["nvml_error"] == "IN_USE"
    assert env.nvml.get("gpu.0.drain") == "0"


def test_reset_with_nvidia_smi_runs_an_argument_list(tmp_path: Path, fake_nvml_dir: Path) -> None:
    record = tmp_path / "argv.txt"
    script = tmp_path / "broken" / "nvidia-smi"
    with running_env(tmp_path / "smi", fake_nvml_dir, {"REMEDIATOR_RESET_METHOD": "nvidia-smi"}) as env:
        script = Path(env.sidecar.env["REMEDIATOR_NVIDIA_SMI"])
        script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\necho "GPU reset done"\n')
        os.chmod(script, 0o755)
        uuid = gpu_uuid(1)
        body = httpx.post(
            f"{env.url}/v1/gpus/{uuid}/reset",
            headers={"Authorization": "Bearer sidecar-test-token"},
            timeout=30,
        ).json()
        assert body["method"] == "nvidia-smi"
        assert body["healthy"] is True
        assert body["nvidia_smi"]["argv"] == [str(script), "--gpu-reset", "-i", uuid]
        assert record.read_text().splitlines() == ["--gpu-reset", "-i", uuid]
        assert all(env.nvml.calls(fn) == 0 for fn in MUTATIONS)

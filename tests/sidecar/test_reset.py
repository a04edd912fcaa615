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


# -- holders of the device files (fake /proc) -----------------------------------------------------------

EXPORTER_POD = "5d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
PLUGIN_POD = "6e2d3c4b-5f6a-4b7c-9d8e-0f1a2b3c4d5e"


def add_holder(env: SidecarEnv, pid: int, argv0: str, files: list[str], pod_uid: str | None = None) -> None:
    """A process in the fake /proc with `files` open (fd symlinks), its cmdline and cgroup."""
    root = env.proc_root / str(pid)
    (root / "fd").mkdir(parents=True, exist_ok=True)
    for n, target in enumerate(files, start=3):
        os.symlink(target, root / "fd" / str(n))
    os.symlink("socket:[4242]", root / "fd" / "0")
    (root / "cmdline").write_bytes(argv0.encode() + b"\0--flag\0")
    (root / "comm").write_text(Path(argv0).name[:15] + "\n")
    cgroup = f"0::/kubepods/burstable/pod{pod_uid}/{'d' * 64}\n" if pod_uid else "0::/system.slice/x.service\n"
    (root / "cgroup").write_text(cgroup)


def gpu_operator_node(env: SidecarEnv) -> None:
    """GPU 0 held the way a GPU Operator node holds it, plus a workload on GPU 1 only."""
    add_holder(env, 101, "/usr/bin/dcgm-exporter", ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"], EXPORTER_POD)
    add_holder(env, 102, "/usr/bin/nv-hostengine", ["/dev/nvidiactl", "/dev/nvidia0"])
    add_holder(env, 103, "/usr/bin/nvidia-persistenced", ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"])
    add_holder(env, 104, "/usr/bin/nvidia-device-plugin", ["/dev/nvidiactl", "/dev/nvidia-uvm"], PLUGIN_POD)
    add_holder(env, 105, "/usr/bin/nv-fabricmanager", ["/dev/nvidiactl", "/dev/nvidia0"])
    add_holder(env, 106, "/opt/conda/bin/python", ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"])  # GPU 1
    add_holder(env, 107, "/usr/bin/bash", ["/dev/null", "/dev/pts/0"])
    env.nvml.set("gpu.0.persistence", 1)


def test_reset_refusal_names_every_holder_of_the_device(env: SidecarEnv, http: httpx.Client) -> None:
    gpu_operator_node(env)
    response = http.post(f"/v1/gpus/{gpu_uuid(0)}/reset")
    assert response.status_code == 409
    body = response.json()
    held = {(h.get("pid"), h.get("program"), h["kind"], h.get("pod_uid")) for h in body["holders"]}
    assert held == {
        (101, "dcgm-exporter", "dcgm-exporter", EXPORTER_POD),
        (102, "nv-hostengine", "dcgm-hostengine", None),
        (103, "nvidia-persistenced", "persistenced", None),
        (104, "nvidia-device-plugin", "device-plugin", PLUGIN_POD),  # control files only: may reach any GPU
        (105, "nv-fabricmanager", "fabric-manager", None),
        (None, None, "persistence-mode", None),
    }
    [exporter] = [h for h in body["holders"] if h.get("pid") == 101]
    assert exporter["files"] == ["/dev/nvidia0", "/dev/nvidiactl"]  # not GPU 1's file
    for named in ("pid 101 dcgm-exporter (dcgm-exporter) in pod " + EXPORTER_POD, "pid 102 nv-hostengine",
                  "pid 103 nvidia-persistenced", "pid 104 nvidia-device-plugin", "pid 105 nv-fabricmanager",
                  "persistence mode on"):
        assert named in body["error"], named
    assert "python" not in body["error"] and "bash" not in body["error"]
    assert all(env.nvml.calls(fn) == 0 for fn in (*MUTATIONS, "nvmlDeviceSetPersistenceMode"))
    assert env.nvml.get("gpu.0.persistence") == "1"  # never turned off by the agent on its own


def test_a_process_holding_only_another_gpu_does_not_block(env: SidecarEnv, http: httpx.Client) -> None:
    add_holder(env, 106, "/opt/conda/bin/python", ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"])
    body = http.post(f"/v1/gpus/{gpu_uuid(0)}/reset").json()
    assert body["changed"] is True and body["healthy"] is True
    assert http.post(f"/v1/gpus/{gpu_uuid(1)}/reset").status_code == 409


def test_persistence_off_on_request_turns_it_off_for_the_reset_and_on_again(
    env: SidecarEnv, http: httpx.Client
) -> None:
    env.nvml.set("gpu.0.persistence", 1)
    add_holder(env, 103, "/usr/bin/nvidia-persistenced", ["/dev/nvidiactl", "/dev/nvidia0"])
    body = http.post(f"/v1/gpus/{gpu_uuid(0)}/reset", json={"persistence_off": True}).json()
    assert body["changed"] is True and body["healthy"] is True
    assert body["persistence_mode"] == {"was": True, "turned_off": True, "restored": True}
    assert env.nvml.calls("nvmlDeviceSetPersistenceMode") == 2  # off, then on again
    assert env.nvml.get("gpu.0.persistence") == "1"
    # Another holder still refuses, persistence_off or not, and persistence mode is left as it was.
    add_holder(env, 102, "/usr/bin/nv-hostengine", ["/dev/nvidiactl", "/dev/nvidia0"])
    refused = http.post(f"/v1/gpus/{gpu_uuid(0)}/reset", json={"persistence_off": True})
    assert refused.status_code == 409 and "nv-hostengine" in refused.json()["error"]
    assert env.nvml.calls("nvmlDeviceSetPersistenceMode") == 2

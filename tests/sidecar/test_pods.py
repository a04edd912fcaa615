"""GET /v1/gpus/{uuid}/pods: kubelet allocations joined with NVML processes and their cgroups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.sidecar.conftest import AUTH, FakePod, SidecarEnv, running_env
from tests.sidecar.fakenvml import gpu_uuid, mig_uuid

UID_A = "aaaaaaaa-1111-4111-8111-000000000001"
UID_B = "bbbbbbbb-2222-4222-8222-000000000002"
UID_C = "cccccccc-3333-4333-8333-000000000003"


def names(body: dict) -> list[str]:
    return sorted(f"{p['namespace']}/{p['name']}" for p in body["pods"])


def test_gpu_uuid_allocations_and_active_marking(env: SidecarEnv, http: httpx.Client) -> None:
    env.set_pods(
        [
            FakePod("ml", "trainer", UID_A, {"main": [gpu_uuid(0)]}),
            FakePod("ml", "other-gpu", UID_B, {"main": [gpu_uuid(1)]}),
            FakePod("ml", "idle", UID_C, {"main": [gpu_uuid(0) + "::1"], "side": []}),
        ]
    )
    # systemd driver, cgroup v2; the idle pod runs no process on the GPU.
    env.add_process(
        0,
        4001,
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_A.replace('-', '_')}.slice/"
        f"cri-containerd-{'d' * 64}.scope\n",
    )
    env.add_process(0, 4002, "0::/system.slice/some-host-daemon.service\n")

    body = http.get(f"/v1/gpus/{gpu_uuid(0)}/pods").json()

    assert names(body) == ["ml/idle", "ml/trainer"]
    trainer = next(p for p in body["pods"] if p["name"] == "trainer")
    assert trainer["uid"] == UID_A
    assert trainer["active"] is True
    assert trainer["containers"] == [
        {"name": "main", "resource": "nvidia.com/gpu", "device_ids": [gpu_uuid(0)]}
    ]
    assert trainer["processes"] == [{"pid": 4001, "used_memory_bytes": 1 << 30}]
    idle = next(p for p in body["pods"] if p["name"] == "idle")
    assert (idle["uid"], idle["active"]) == (UID_C, False)
    assert idle["containers"][0]["device_ids"] == [gpu_uuid(0) + "::1"]
    assert {p["pid"]: p["pod_uid"] for p in body["processes"]} == {4001: UID_A, 4002: None}


def test_time_sliced_replicas_of_one_gpu(env: SidecarEnv, http: httpx.Client) -> None:
    env.set_pods(
        [
            FakePod("a", "replica-0", UID_A, {"c": [gpu_uuid(1) + "::0"]}),
            FakePod("b", "replica-3", UID_B, {"c": [gpu_uuid(1) + "::3"]}),
            FakePod("c", "elsewhere", UID_C, {"c": [gpu_uuid(0) + "::0"]}),
        ]
    )
    # cgroupfs driver, cgroup v1
    env.add_process(1, 5001, f"11:memory:/kubepods/besteffort/pod{UID_B}/{'e' * 64}\n")
    body = http.get(f"/v1/gpus/{gpu_uuid(1)}/pods").json()
    assert names(body) == ["a/replica-0", "b/replica-3"]
    assert {p["name"]: p["active"] for p in body["pods"]} == {"replica-0": False, "replica-3": True}


def test_mig_devices(env: SidecarEnv, http: httpx.Client) -> None:
    env.nvml.set("gpu.0.mig_mode", 1)
    env.nvml.set("gpu.0.mig.count", 2)
    env.nvml.set("gpu.0.mig.0.uuid", mig_uuid(0, 0))
    env.nvml.set("gpu.0.mig.1.uuid", mig_uuid(0, 1))
    env.set_pods(
        [
            FakePod("a", "slice-0", UID_A, {"c": [mig_uuid(0, 0)]}, resource="nvidia.com/mig-1g.18gb"),
            FakePod("b", "slice-1", UID_B, {"c": [mig_uuid(0, 1)]}, resource="nvidia.com/mig-1g.18gb"),
            FakePod("c", "plain", UID_C, {"c": [gpu_uuid(1)]}),
        ]
    )
    whole = http.get(f"/v1/gpus/{gpu_uuid(0)}/pods").json()
    assert names(whole) == ["a/slice-0", "b/slice-1"]
    one = http.get(f"/v1/gpus/{mig_uuid(0, 1)}/pods").json()
    assert names(one) == ["b/slice-1"]
    assert one["gpu_uuid"] == gpu_uuid(0)


def test_the_pods_of_one_gpu_instance(env: SidecarEnv, http: httpx.Client) -> None:
    """An Xid line names the GPU instance (`GPU-I:05`): the pods of that instance's MIG device only."""
    env.nvml.set("gpu.0.mig_mode", 1)
    env.nvml.set("gpu.0.mig.count", 2)
    env.nvml.set("gpu.0.mig.0.uuid", mig_uuid(0, 0))
    env.nvml.set("gpu.0.mig.0.gi", 3)
    env.nvml.set("gpu.0.mig.1.uuid", mig_uuid(0, 1))
    env.nvml.set("gpu.0.mig.1.gi", 5)
    env.set_pods(
        [
            FakePod("a", "slice-0", UID_A, {"c": [mig_uuid(0, 0)]}, resource="nvidia.com/mig-1g.18gb"),
            FakePod("b", "slice-1", UID_B, {"c": [mig_uuid(0, 1)]}, resource="nvidia.com/mig-1g.18gb"),
        ]
    )
    one = http.get(f"/v1/gpus/{gpu_uuid(0)}/pods", params={"gpu_instance": 5}).json()
    assert (names(one), one["uuid"], one["gpu_uuid"]) == (["b/slice-1"], mig_uuid(0, 1), gpu_uuid(0))
    assert names(http.get(f"/v1/gpus/{gpu_uuid(0)}/pods", params={"gpu_instance": 3}).json()) == ["a/slice-0"]
    missing = http.get(f"/v1/gpus/{gpu_uuid(0)}/pods", params={"gpu_instance": 7})
    assert missing.status_code == 404 and "no MIG device of GPU instance 7" in missing.json()["error"]
    plain = http.get(f"/v1/gpus/{gpu_uuid(1)}/pods", params={"gpu_instance": 5})  # not in MIG mode
    assert plain.status_code == 404
    assert http.get(f"/v1/gpus/{gpu_uuid(0)}/pods", params={"gpu_instance": -1}).status_code == 422


def test_non_gpu_resources_are_ignored(env: SidecarEnv, http: httpx.Client) -> None:
    env.set_pods([FakePod("a", "nic", UID_A, {"c": [gpu_uuid(0)]}, resource="example.com/sriov")])
    assert http.get(f"/v1/gpus/{gpu_uuid(0)}/pods").json()["pods"] == []


def test_without_checkpoint_active_is_unknown(env: SidecarEnv, http: httpx.Client) -> None:
    env.set_pods([FakePod("ml", "trainer", UID_A, {"main": [gpu_uuid(0)]})])
    env.checkpoint.unlink()
    env.add_process(0, 4001, f"0::/kubepods/pod{UID_A}/{'d' * 64}\n")
    body = http.get(f"/v1/gpus/{gpu_uuid(0)}/pods").json()
    assert body["pods"][0]["active"] is None
    assert body["processes"][0]["pod_uid"] == UID_A
    assert "checkpoint unreadable" in body["notes"][0]


def test_kubelet_down_is_503(env: SidecarEnv, http: httpx.Client) -> None:
    env.kubelet.fail = True
    response = http.get(f"/v1/gpus/{gpu_uuid(0)}/pods")
    assert response.status_code == 503
    assert "PodResources" in response.json()["error"]


@pytest.fixture(scope="module")
def index_env(tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: Path) -> Iterator[SidecarEnv]:
    extra = {"REMEDIATOR_DEVICE_ID_STRATEGY": "index"}
    with running_env(tmp_path_factory.mktemp("index"), fake_nvml_dir, extra) as env:
        yield env


def test_index_device_ids(index_env: SidecarEnv) -> None:
    index_env.reset()
    index_env.set_pods(
        [
            FakePod("a", "on-zero", UID_A, {"c": ["0"]}),
            FakePod("b", "on-one", UID_B, {"c": ["1"]}),
            FakePod("c", "on-one-sliced", UID_C, {"c": ["1::2"]}),
        ]
    )
    body = httpx.get(f"{index_env.url}/v1/gpus/{gpu_uuid(1)}/pods", headers=AUTH).json()
    assert names(body) == ["b/on-one", "c/on-one-sliced"]

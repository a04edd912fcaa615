"""Pure pieces of the sidecar: cgroup parsing, device-id normalisation, checkpoint, state file, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remediator.sidecar.cgroups import parse_cgroup, pod_of_pid
from remediator.sidecar.checkpoint import read_device_owners
from remediator.sidecar.devices import GpuIds, parse_device_id
from remediator.sidecar.nvml import NvmlError
from remediator.sidecar.problems import Problem, status_for_nvml
from remediator.sidecar.state import PowerStateStore

UID = "6f1c2a3b-1111-4222-8333-0123456789ab"
CID = "a" * 64


@pytest.mark.parametrize(
    "text",
    [
        # cgroup v2, systemd driver
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
        f"cri-containerd-{CID}.scope\n",
        # cgroup v2, systemd, Guaranteed QoS (no QoS slice)
        f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
        # cgroup v1, cgroupfs driver
        f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n",
        # cgroup v1, systemd driver, BestEffort
        f"4:devices:/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope\n",
        # cgroup v2 seen from inside a nested runtime (extra prefix)
        f"0::/system.slice/kubelet.slice/kubepods/pod{UID}/{CID}\n",
    ],
)
def test_parse_cgroup_finds_pod_uid_and_container(text: str) -> None:
    found = parse_cgroup(text)
    assert found is not None
    assert found.pod_uid == UID
    assert found.container_id == CID


def test_parse_cgroup_host_process_is_none() -> None:
    assert parse_cgroup("0::/system.slice/nvidia-persistenced.service\n") is None
    assert parse_cgroup("12:memory:/user.slice/user-0.slice\n") is None


def test_pod_of_pid_reads_proc_tree(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{UID}/{CID}\n")
    found = pod_of_pid(tmp_path, 42)
    assert found is not None and found.pod_uid == UID
    assert pod_of_pid(tmp_path, 43) is None


GPU = GpuIds(index=1, uuid="GPU-12345678-aaaa-bbbb-cccc-1234567890ab", mig_uuids=("MIG-11112222-3333",))


@pytest.mark.parametrize(
    ("raw", "strategy", "wanted", "matches"),
    [
        (GPU.uuid, "uuid", GPU.uuid, True),
        (f"{GPU.uuid}::3", "uuid", GPU.uuid, True),
        ("GPU-ffffffff-aaaa-bbbb-cccc-1234567890ab", "uuid", GPU.uuid, False),
        ("MIG-11112222-3333", "uuid", GPU.uuid, True),
        ("MIG-11112222-3333", "uuid", "MIG-11112222-3333", True),
        (GPU.uuid, "uuid", "MIG-11112222-3333", False),
        (f"MIG-{GPU.uuid}/1/0", "uuid", GPU.uuid, True),
        ("1", "index", GPU.uuid, True),
        ("1::0", "index", GPU.uuid, True),
        ("1:2", "index", GPU.uuid, True),
        ("0", "index", GPU.uuid, False),
        ("1", "uuid", GPU.uuid, False),
    ],
)
def test_device_ids_normalise(raw: str, strategy: str, wanted: str, matches: bool) -> None:
    ref = parse_device_id(raw, strategy)  # type: ignore[arg-type]
    assert ref.matches(GPU, wanted) is matches


def test_time_slice_replica_is_kept() -> None:
    ref = parse_device_id(f"{GPU.uuid}::7", "uuid")
    assert (ref.kind, ref.value, ref.replica) == ("gpu", GPU.uuid, 7)


def test_checkpoint_both_shapes(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text(
        json.dumps(
            {
                "Data": {
                    "PodDeviceEntries": [
                        {
                            "PodUID": UID,
                            "ContainerName": "c",
                            "ResourceName": "nvidia.com/gpu",
                            "DeviceIDs": {"0": ["GPU-a::1"], "1": ["GPU-b"]},
                        },
                        {
                            "PodUID": "old",
                            "ContainerName": "c",
                            "ResourceName": "nvidia.com/gpu",
                            "DeviceIDs": ["GPU-c"],
                        },
                    ]
                }
            }
        )
    )
    owners = read_device_owners(path)
    assert owners == {
        ("nvidia.com/gpu", "GPU-a::1"): UID,
        ("nvidia.com/gpu", "GPU-b"): UID,
        ("nvidia.com/gpu", "GPU-c"): "old",
    }
    assert read_device_owners(tmp_path / "missing") is None


def test_state_store_remembers_first_original_only(tmp_path: Path) -> None:
    store = PowerStateStore(tmp_path / "deep" / "state.json")
    assert store.original_mw("GPU-x") is None
    store.remember("GPU-x", 700_000)
    store.remember("GPU-x", 350_000)
    assert PowerStateStore(store.path).original_mw("GPU-x") == 700_000
    assert not list(store.path.parent.glob(".state.json.*")), "no temp files left behind"
    store.forget("GPU-x")
    assert store.load() == {}


def test_state_store_corrupt_file_is_an_error_not_an_empty_state(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("{not json")
    with pytest.raises(Problem) as caught:
        PowerStateStore(path).load()
    assert "unreadable" in caught.value.error


@pytest.mark.parametrize(
    ("code", "status"),
    [(3, 501), (4, 403), (15, 410), (6, 404), (2, 422), (1, 503), (12, 503), (9, 503), (999, 502)],
)
def test_nvml_error_statuses(code: int, status: int) -> None:
    assert status_for_nvml(NvmlError(code, "nvmlDeviceGetPowerUsage")) == status

"""Fixtures: the fake NVML library, a fake kubelet, a fake /proc tree and a real sidecar subprocess.

pynvml loads libnvidia-ml.so.1 once per process and the dynamic loader reads LD_LIBRARY_PATH only at
process start, so the sidecar under test runs as a subprocess (the real `serve`, uvicorn on 127.0.0.1)
with LD_LIBRARY_PATH pointing at the fake. Everything the fake and the sidecar read is a file in the
module's temp dir, reset before each test, so one sidecar process serves a whole test module.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest

from remediator.sidecar.proto import api_pb2, api_pb2_grpc
from tests.sidecar.fakenvml import FakeNvml, build, h200_state

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "sidecar-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class FakePod:
    namespace: str
    name: str
    uid: str
    # container name -> device ids
    containers: dict[str, list[str]]
    resource: str = "nvidia.com/gpu"


@dataclass
class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    """PodResources v1 served on a unix socket; `pods` is what List answers."""

    socket_path: Path
    pods: list[FakePod] = field(default_factory=list)
    fail: bool = False

    def List(self, request: object, context: grpc.ServicerContext) -> api_pb2.ListPodResourcesResponse:
        if self.fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
        return api_pb2.ListPodResourcesResponse(
            pod_resources=[
                api_pb2.PodResources(
                    name=p.name,
                    namespace=p.namespace,
                    containers=[
                        api_pb2.ContainerResources(
                            name=c,
                            devices=[api_pb2.ContainerDevices(resource_name=p.resource, device_ids=ids)],
                        )
                        for c, ids in p.containers.items()
                    ],
                )
                for p in self.pods
            ]
        )

    def GetAllocatableResources(
        self, request: object, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        return api_pb2.AllocatableResourcesResponse()


def write_checkpoint(path: Path, pods: list[FakePod]) -> None:
    """The kubelet device manager checkpoint, in the >=1.20 shape (DeviceIDs per NUMA node)."""
    entries = [
        {"PodUID": p.uid, "ContainerName": c, "ResourceName": p.resource, "DeviceIDs": {"0": ids}}
        for p in pods
        for c, ids in p.containers.items()
    ]
    path.write_text(
        json.dumps({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 1})
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class SidecarProcess:
    """`remediator.sidecar.app.serve` in a subprocess with the fake NVML on LD_LIBRARY_PATH.

    It listens on `host` (any 127.0.0.N: a fake node's InternalIP) and a free port.
    """

    def __init__(self, workdir: Path, env: dict[str, str], host: str = "127.0.0.1") -> None:
        self.workdir = workdir
        self.env = env
        self.host = host
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.log = workdir / "sidecar.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, port: int | None = None) -> None:
        """Start on a free port, or on `port` (a node agent coming back where the controller dials it)."""
        code = (
            "import sys\n"
            "from remediator.sidecar.app import serve\n"
            "from remediator.sidecar.settings import SidecarSettings\n"
            "serve(SidecarSettings(), sys.argv[2], int(sys.argv[1]))\n"
        )
        for _ in range(1 if port else 3):
            self.port = port or free_port(self.host)
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", code, str(self.port), self.host],
                    cwd=ROOT,
                    env=self.env,
                    stdout=log,
                    stderr=log,
                )
            if self._wait_ready():
                return
            self.stop()
        raise RuntimeError(f"sidecar did not start; log:\n{self.log.read_text()[-4000:]}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return False
            try:
                httpx.get(self.url + "/healthz", timeout=1.0)
                return True
            except httpx.TransportError:
                time.sleep(0.05)
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@dataclass
class SidecarEnv:
    """One sidecar process and every file it reads, reset to two idle H200s before each test."""

    dir: Path
    nvml: FakeNvml
    kubelet: FakeKubelet
    proc_root: Path
    checkpoint: Path
    state_file: Path
    sidecar: SidecarProcess

    @property
    def url(self) -> str:
        return self.sidecar.url

    def reset(self) -> None:
        self.nvml.write(h200_state(2))
        self.kubelet.pods = []
        self.kubelet.fail = False
        shutil.rmtree(self.proc_root, ignore_errors=True)
        self.proc_root.mkdir()
        self.checkpoint.unlink(missing_ok=True)
        self.state_file.unlink(missing_ok=True)

    def set_pods(self, pods: list[FakePod]) -> None:
        self.kubelet.pods = pods
        write_checkpoint(self.checkpoint, pods)

    def add_process(self, gpu: int, pid: int, cgroup: str, used_bytes: int = 1 << 30) -> None:
        key = f"gpu.{gpu}.procs"
        current = self.nvml.get(key)
        entry = f"{pid}:{used_bytes}"
        self.nvml.set(key, f"{current},{entry}" if current else entry)
        (self.proc_root / str(pid)).mkdir(parents=True, exist_ok=True)
        (self.proc_root / str(pid) / "cgroup").write_text(cgroup)


@pytest.fixture(scope="session")
def fake_nvml_dir() -> Path:
    return build()


def make_env(
    base: Path, lib_dir: Path, extra: dict[str, str] | None = None, host: str = "127.0.0.1"
) -> SidecarEnv:
    base.mkdir(parents=True, exist_ok=True)
    (base / "kmsg").touch()
    if not (base / "boot_id").exists():
        (base / "boot_id").write_text("3f0c2a1e-0000-4000-8000-000000000001\n")
    nvml = FakeNvml(base / "nvml-state.txt")
    nvml.write(h200_state(2))
    sock = base / "kubelet.sock"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "LD_LIBRARY_PATH": str(lib_dir),
        "FAKE_NVML_STATE": str(nvml.path),
        "REMEDIATOR_SIDECAR_TOKEN": TOKEN,
        "REMEDIATOR_PODRESOURCES_SOCKET": str(sock),
        "REMEDIATOR_STATE_FILE": str(base / "state" / "power-state.json"),
        "REMEDIATOR_PROC_ROOT": str(base / "proc"),
        "REMEDIATOR_DEVICE_CHECKPOINT": str(base / "kubelet_internal_checkpoint"),
        "REMEDIATOR_NVIDIA_SMI": str(base / "nvidia-smi"),
        "REMEDIATOR_RESET_SETTLE_SECONDS": "0.5",
        # The detector follows a file in the temp dir, never the test machine's own kernel log.
        "REMEDIATOR_KMSG_PATH": str(base / "kmsg"),
        "REMEDIATOR_BOOT_ID_FILE": str(base / "boot_id"),
        "REMEDIATOR_NODE_NAME": "gpu-node-1",
        **(extra or {}),
    }
    return SidecarEnv(
        dir=base,
        nvml=nvml,
        kubelet=FakeKubelet(sock),
        proc_root=base / "proc",
        checkpoint=base / "kubelet_internal_checkpoint",
        state_file=base / "state" / "power-state.json",
        sidecar=SidecarProcess(base, env, host),
    )


@contextmanager
def running_env(
    base: Path, lib_dir: Path, extra: dict[str, str] | None = None, host: str = "127.0.0.1"
) -> Iterator[SidecarEnv]:
    """A fake kubelet and a sidecar process on `host`, both stopped afterwards."""
    env = make_env(base, lib_dir, extra, host)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(env.kubelet, server)
    server.add_insecure_port(f"unix://{env.kubelet.socket_path}")
    server.start()
    try:
        env.reset()
        env.sidecar.start()
        yield env
    finally:
        env.sidecar.stop()
        server.stop(grace=None)


@pytest.fixture(scope="module")
def sidecar_env(tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: Path) -> Iterator[SidecarEnv]:
    with running_env(tmp_path_factory.mktemp("sidecar"), fake_nvml_dir) as env:
        yield env


@pytest.fixture
def env(sidecar_env: SidecarEnv) -> SidecarEnv:
    """The module's sidecar with fresh state: two idle H200s, no pods, no remembered limits."""
    sidecar_env.reset()
    return sidecar_env


@pytest.fixture
def http(env: SidecarEnv) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=env.url, headers=AUTH, timeout=30.0) as client:
        yield client

"""The controller (runtime, worker, API) on the strict fake API server, and a real node sidecar on fake NVML.

The fake GPU node's InternalIP is 127.0.0.N and its sidecar subprocess listens on exactly that address, so
the controller reaches it the way it reaches a real node: the node's InternalIP plus SIDECAR_PORT, with the
shared SIDECAR_TOKEN. One sidecar serves the module; its files are reset before each test. A `GpuNode`
keeps the fake kubelet (PodResources, device checkpoint) and the fake GPU processes in step with the API
server: an accepted eviction releases the pod's GPU the way the kubelet would once the pod is gone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.engine.conftest import Cluster, MakeCluster, make_cluster  # noqa: F401  (the engine's fixture)
from tests.fakekube.server import Call, FakeKube
from tests.sidecar.conftest import TOKEN, FakePod, SidecarEnv, free_port, running_env
from tests.sidecar.fakenvml import build, gpu_uuid

NODE = "gpu-a"
NODE_IP = "127.0.0.3"


@dataclass
class GpuNode:
    """One fake GPU node: the Node and its pods on the API server, their GPUs in the fake kubelet and NVML."""

    fake: FakeKube
    sidecar: SidecarEnv
    name: str = NODE
    kubelet_pods: list[FakePod] = field(default_factory=list)
    pids: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # pod name -> [(gpu, pid)]

    def add_gpu_pod(self, name: str, gpu: int, *, pid: int | None = None, owner: Any = None) -> dict[str, Any]:
        """A running pod holding GPU `gpu` (one process `pid` on it when given)."""
        pod = self.fake.add_pod(name, "ml", node=self.name, gpus=1, owner=owner)
        uid = str(pod["metadata"]["uid"])
        self.kubelet_pods.append(FakePod("ml", name, uid, {"main": [gpu_uuid(gpu)]}))
        self.sidecar.set_pods(self.kubelet_pods)
        if pid is not None:
            self.sidecar.add_process(gpu, pid, f"0::/kubepods/besteffort/pod{uid}/{'c' * 64}\n")
            self.pids.setdefault(name, []).append((gpu, pid))
        return pod

    def release_on_eviction(self) -> None:
        """Every accepted eviction frees the pod's GPU: kubelet allocation and processes go away."""

        def release(call: Call) -> None:
            self.kubelet_pods = [p for p in self.kubelet_pods if p.name != call.name]
            self.sidecar.set_pods(self.kubelet_pods)
            for gpu, pid in self.pids.pop(call.name or "", []):
                self.drop_process(gpu, pid)

        self.fake.before("evict", "pods", release, times=1000)

    def drop_process(self, gpu: int, pid: int) -> None:
        state = self.sidecar.nvml.read()
        key = f"gpu.{gpu}.procs"
        left = [e for e in state.pop(key, "").split(",") if e and not e.startswith(f"{pid}:")]
        if left:
            state[key] = ",".join(left)
        self.sidecar.nvml.write(state)

    def taints(self) -> list[dict[str, Any]]:
        node = self.fake.node(self.name) or {}
        return [{k: t.get(k) for k in ("key", "value", "effect")} for t in node["spec"].get("taints") or []]

    def cordoned(self) -> bool:
        return bool((self.fake.node(self.name) or {})["spec"].get("unschedulable"))

    def evicted(self) -> list[str]:
        return sorted(c.name or "" for c in self.fake.requests("evict") if c.ok)

    def power_limit_mw(self, gpu: int) -> int:
        return int(self.sidecar.nvml.get(f"gpu.{gpu}.power_limit") or 0)


@pytest.fixture(scope="module")
def node_sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarEnv]:
    with running_env(tmp_path_factory.mktemp("gpu-e2e"), build(), host=NODE_IP) as env:
        yield env


@pytest.fixture
def sidecar(node_sidecar: SidecarEnv) -> SidecarEnv:
    """The node's sidecar with fresh state: two idle H200s, no pods, no remembered power limits."""
    node_sidecar.reset()
    return node_sidecar


@pytest.fixture
def gpu_node(fake_kube: FakeKube, sidecar: SidecarEnv) -> GpuNode:
    """Node gpu-a at 127.0.0.3 with a CPU pod and a DaemonSet pod; tests add the GPU pods."""
    fake_kube.add_node(NODE, ip=NODE_IP, labels={"nvidia.com/gpu.present": "true"}, gpus=2)
    fake_kube.add_pod("web-1", "apps", node=NODE, gpus=0)
    ds = fake_kube.add_daemonset("dcgm-exporter", "monitoring")
    fake_kube.add_pod("dcgm-exporter-x", "monitoring", node=NODE, gpus=0, owner=ds)
    node = GpuNode(fake_kube, sidecar)
    node.release_on_eviction()
    return node


MakeGpuCluster = Callable[..., Any]


@pytest.fixture
async def gpu_cluster(
    make_cluster: MakeCluster,  # noqa: F811  (the fixture imported above)
    sidecar: SidecarEnv,
) -> AsyncIterator[MakeGpuCluster]:
    """make(reachable=True, port=None, **settings): the controller, dialling the node's sidecar (or a port nobody
    listens on; or `port`, where a test starts and stops a node agent of its own)."""
    made: list[Cluster] = []

    async def make(*, reachable: bool = True, port: int | None = None, **overrides: Any) -> Cluster:
        if port is None:
            port = sidecar.sidecar.port if reachable else free_port(NODE_IP)
        cluster: Cluster = await make_cluster(sidecar_port=port, sidecar_token=TOKEN, real_gates=True, **overrides)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        if cluster.rt.sidecar is not None:
            await cluster.rt.sidecar.aclose()


def gpu_alert_labels(alertname: str, gpu: int, *, with_uuid: bool = True, **extra: str) -> dict[str, str]:
    """Labels as dcgm-exporter gives them for GPU `gpu` of the node (`with_uuid=False`: the index only)."""
    labels = {"alertname": alertname, "Hostname": NODE, "gpu": str(gpu), "modelName": "NVIDIA H200", **extra}
    if with_uuid:
        labels |= {"UUID": gpu_uuid(gpu), "pci_bus_id": f"00000000:{0x18 + gpu:02X}:00.0"}
    return labels

"""A GPU reset on a GPU Operator node: the operands that hold the GPU leave the node for the reset and come back.

A small reconciler stands in for the GPU Operator's DaemonSets on the strict fake API server: an operand's pod
runs on the node while its label nvidia.com/gpu.deploy.<operand> is "true" (and, for dcgm-exporter, holds the
GPU's device file in the fake /proc, so the node agent refuses a reset under it), goes when the label is
"false" and comes back, Ready a moment later, when the label is restored.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from remediator.actions.base import ActionContext, Target
from remediator.actions.gpu import GpuReset
from remediator.errors import ServiceUnavailable, StepFailed
from tests.engine.conftest import Cluster
from tests.fakekube import builders
from tests.fakekube.server import FakeKube
from tests.gpu_e2e.conftest import NODE, NODE_IP, GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.gpu_e2e.test_gate_unknown import Agent
from tests.helpers import am_alert, am_payload
from tests.sidecar.conftest import SidecarEnv
from tests.sidecar.fakenvml import gpu_uuid

OPERANDS = ("dcgm-exporter", "device-plugin", "gpu-feature-discovery")
LABELS = {f"nvidia.com/gpu.deploy.{op}": "true" for op in OPERANDS}
HOLDER_PID = 2101


class GpuOperator:
    """Reconciles one operand pod per label on the node, as the DaemonSet controller would."""

    def __init__(self, node: GpuNode) -> None:
        self.node = node
        self.fake: FakeKube = node.fake
        self.seen_off: set[str] = set()

    def pod_name(self, operand: str) -> str:
        return f"nvidia-{operand}-{NODE}"

    def _holder(self, present: bool) -> None:
        root = self.node.sidecar.proc_root / str(HOLDER_PID)
        if present and not root.exists():
            (root / "fd").mkdir(parents=True)
            os.symlink("/dev/nvidia0", root / "fd" / "3")
            os.symlink("/dev/nvidiactl", root / "fd" / "4")
            (root / "cmdline").write_bytes(b"/usr/bin/dcgm-exporter\0")
        elif not present and root.exists():
            for entry in (root / "fd").iterdir():
                entry.unlink()
            (root / "fd").rmdir()
            (root / "cmdline").unlink()
            root.rmdir()

    def tick(self) -> None:
        labels = (self.fake.node(NODE) or {})["metadata"].get("labels") or {}
        for operand in OPERANDS:
            label, name = f"nvidia.com/gpu.deploy.{operand}", self.pod_name(operand)
            pod = self.fake.pod("gpu-operator", name)
            if labels.get(label) == "true":
                if pod is None:
                    body = builders.pod_body(name, "gpu-operator", node=NODE, ready=False)
                    body["spec"]["nodeSelector"] = {label: "true"}
                    self.fake.put(body)
                elif not _ready(pod):
                    self.fake.set_pod_phase("gpu-operator", name, "Running", ready=True)
            else:
                self.seen_off.add(label)
                if pod is not None:
                    self.fake.remove("pods", "gpu-operator", name)
            if operand == "dcgm-exporter":
                self._holder(self.fake.pod("gpu-operator", name) is not None)

    async def run(self) -> None:
        while True:
            self.tick()
            await asyncio.sleep(0.05)


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


@pytest.fixture
async def operator(gpu_node: GpuNode) -> AsyncIterator[GpuOperator]:
    gpu_node.fake.write("nodes", None, NODE, {"metadata": {"labels": LABELS}})
    reconciler = GpuOperator(gpu_node)
    reconciler.tick()
    reconciler.tick()
    task = asyncio.ensure_future(reconciler.run())
    yield reconciler
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def labels_now(fake: FakeKube) -> dict[str, str]:
    labels = (fake.node(NODE) or {})["metadata"].get("labels") or {}
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/gpu.deploy.")}


async def test_operands_leave_for_the_reset_and_come_back_ready(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode, operator: GpuOperator
) -> None:
    gpu_node.sidecar.nvml.set("gpu.0.persistence", 1)
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="119"))))
    await cluster.settle(90)

    rem = await cluster.only_remediation()
    [reset] = [s for s in rem["steps"] if s["name"] == "reset"]
    assert rem["state"] == "succeeded", (rem["state_reason"], reset)
    assert reset["output"]["operands"] == {label: {"previous": "true", "pods": 1} for label in LABELS}
    assert operator.seen_off == set(LABELS)  # each operand was off the node ...
    assert gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2") == 1  # ... while the GPU was reset
    assert labels_now(gpu_node.fake) == LABELS  # and every label is back
    assert all(_ready(gpu_node.fake.pod("gpu-operator", operator.pod_name(op)) or {}) for op in OPERANDS)
    assert gpu_node.sidecar.nvml.get("gpu.0.persistence") == "1"
    patches = [c.body for c in gpu_node.fake.requests("patch", "nodes") if c.ok
               and "nvidia.com/gpu.deploy.dcgm-exporter" in str(c.body)]
    assert [p["metadata"]["labels"]["nvidia.com/gpu.deploy.dcgm-exporter"] for p in patches] == ["false", "true"]


async def test_operands_restored_after_a_crash_mid_reset(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode, operator: GpuOperator
) -> None:
    """The step's checkpoint holds the previous values; a step resumed after the controller died while the
    reset was under way puts them back, waits for the operands to be Ready, and does not reset again."""
    cluster: Cluster = await gpu_cluster()
    saved: list[dict[str, Any]] = []

    async def checkpoint(progress: dict[str, Any]) -> None:
        saved.append(dict(progress))

    def context(progress: dict[str, Any]) -> ActionContext:
        return ActionContext(
            remediation_id="r-1", step_name="reset", target=Target("gpu", node=NODE, gpu_uuid=gpu_uuid(0)),
            settings=cluster.settings, dry_run=False, kube=cluster.rt.kube, sidecar=cluster.rt.sidecar,
            progress=progress, checkpoint=checkpoint, gathered={"node": {"internal_ip": NODE_IP}},
        )

    action = GpuReset()
    params = action.parse({"operands": list(OPERANDS), "operand_timeout": 30})
    # The first controller: operands off, then it dies once the reset is recorded as under way.
    first = asyncio.ensure_future(action.apply(context({}), params))
    deadline = asyncio.get_running_loop().time() + 30
    while not any(p.get("operands_phase") == "resetting" for p in saved):
        assert asyncio.get_running_loop().time() < deadline, saved
        await asyncio.sleep(0)
    first.cancel()  # the process is gone: nothing after this point of the first run happens
    with contextlib.suppress(BaseException):
        await first
    crashed = next(p for p in saved if p.get("operands_phase") == "resetting")
    assert crashed["operands"] == {label: {"previous": "true", "pods": 1} for label in LABELS}
    # Where the first controller died, the labels were off (what the store holds is all the next one knows).
    gpu_node.fake.write("nodes", None, NODE, {"metadata": {"labels": dict.fromkeys(LABELS, "false")}})
    resets_before = gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2")

    with pytest.raises(StepFailed, match="stopped during the reset"):
        await action.apply(context(dict(crashed)), params)
    assert labels_now(gpu_node.fake) == LABELS
    assert all(_ready(gpu_node.fake.pod("gpu-operator", operator.pod_name(op)) or {}) for op in OPERANDS)
    assert gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2") == resets_before  # not reset again


async def test_a_reset_the_node_agent_never_got_is_run_again_once_it_answers(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode, operator: GpuOperator, sidecar: SidecarEnv
) -> None:
    """The node agent goes away right before the reset request (a DaemonSet rollout): the connection is refused,
    so the GPU was not reset. The operands come back while the remediation waits for the agent, also when a
    look at it finds the agent still away; once it answers, the step run again resets the GPU instead of
    failing as if the controller had died mid-reset."""
    agent = Agent(sidecar)
    agent.up()
    try:
        cluster: Cluster = await gpu_cluster(port=agent.port)
        saved: list[dict[str, Any]] = []
        cut = [True]  # the agent goes away before the first reset request only

        async def checkpoint(progress: dict[str, Any]) -> None:
            saved.append(dict(progress))
            if progress.get("operands_phase") == "resetting" and cut:
                cut.clear()
                agent.down()  # the request about to go out finds nobody listening

        def context(progress: dict[str, Any]) -> ActionContext:
            return ActionContext(
                remediation_id="r-1", step_name="reset", target=Target("gpu", node=NODE, gpu_uuid=gpu_uuid(0)),
                settings=cluster.settings, dry_run=False, kube=cluster.rt.kube, sidecar=cluster.rt.sidecar,
                progress=progress, checkpoint=checkpoint, gathered={"node": {"internal_ip": NODE_IP}},
            )

        action = GpuReset()
        params = action.parse({"operands": list(OPERANDS), "operand_timeout": 30})
        resets = gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2")
        with pytest.raises(ServiceUnavailable, match="/reset unreachable") as refused:
            await action.apply(context({}), params)
        assert refused.value.details == {"sent": False} and refused.value.dependency == "node agent"
        assert saved[-1]["operands_phase"] == "restored"  # not 'resetting': the GPU was certainly not reset
        assert labels_now(gpu_node.fake) == LABELS
        assert gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2") == resets

        # The next look finds the agent still away: the operands went off again and are back, not left off.
        with pytest.raises(ServiceUnavailable, match="/v1/gpus unreachable"):
            await action.apply(context(dict(saved[-1])), params)
        assert labels_now(gpu_node.fake) == LABELS
        assert [p["metadata"]["labels"]["nvidia.com/gpu.deploy.dcgm-exporter"] for p in node_label_patches(gpu_node)
                ] == ["false", "true", "false", "true"]

        agent.up()
        result = await action.apply(context(dict(saved[-1])), params)
        assert result.changed and result.output["operands"] == {label: {"previous": "true", "pods": 1}
                                                                for label in LABELS}
        assert gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2") == resets + 1
        assert labels_now(gpu_node.fake) == LABELS
        assert all(_ready(gpu_node.fake.pod("gpu-operator", operator.pod_name(op)) or {}) for op in OPERANDS)
    finally:
        agent.down()


def node_label_patches(node: GpuNode) -> list[Any]:
    return [c.body for c in node.fake.requests("patch", "nodes") if c.ok
            and "nvidia.com/gpu.deploy.dcgm-exporter" in str(c.body)]

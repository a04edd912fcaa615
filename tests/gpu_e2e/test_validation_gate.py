"""reset-gpu's return-to-service gate end to end: controller, strict fake API server, real sidecar, fake NVML.

A GPU whose row remap is still pending after the reset fails the gate: the remediation fails, the node stays
tainted, cordoned and GPUHealthy=False, and the failing check is named in the step's output and error, the
remediation's reason and the notification. A GPU that passes goes back to service with GPUHealthy=True.
"""

from __future__ import annotations

from typing import Any

from tests.engine.conftest import Cluster
from tests.gpu_e2e.conftest import GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.gpu_e2e.test_reset import TAINT, forward, trainers
from tests.helpers import am_alert, am_payload
from tests.notify.receiver import receiver
from tests.sidecar.fakenvml import gpu_uuid


def gpu_healthy(node: GpuNode) -> dict[str, Any]:
    conditions = (node.fake.node(node.name) or {})["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "GPUHealthy")


async def test_a_pending_row_remap_fails_the_gate_and_the_node_stays_quarantined(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    trainers(gpu_node)
    gpu_node.sidecar.nvml.set("gpu.0.remap.pending", 1)
    async with receiver() as hook:
        cluster: Cluster = await gpu_cluster(notify_webhook_url=hook.url)
        await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 0, xid="119"))))
        await cluster.settle()

        listed = sorted((await cluster.api.get("/api/v1/remediations")).json(), key=lambda r: r["created_at"])
        assert [r["playbook"] for r in listed] == ["reset-gpu", "reboot-node"]  # the next rung of the ladder
        rem = (await cluster.api.get(f"/api/v1/remediations/{listed[0]['id']}")).json()
        escalated = (await cluster.api.get(f"/api/v1/remediations/{listed[1]['id']}")).json()
        assert escalated["escalation"]["from"] == rem["id"] and escalated["escalation"]["reason"] == "gate_failed"
        assert escalated["escalation"]["gate"]["failed"] == {gpu_uuid(0): ["remapped_rows.pending"]}
        assert rem["state"] == "failed"
        assert forward(rem) == [
            ("taint", "succeeded"), ("condition", "succeeded"), ("drain", "succeeded"), ("reset", "succeeded"),
            ("validate", "failed"),
        ]
        assert gpu_node.sidecar.nvml.calls("nvmlDeviceRemoveGpu_v2") == 1  # the reset did run
        validate = next(s for s in rem["steps"] if s["name"] == "validate")
        assert validate["error"].startswith(
            f"StepFailed: GPU validation failed: {gpu_uuid(0)}: remapped_rows.pending (a row remap is pending"
        )
        output = validate["output"]
        assert output["verdict"] == "fail" and output["failed"] == {gpu_uuid(0): ["remapped_rows.pending"]}
        [report] = output["gpus"]
        checks = {c["name"]: c for c in report["checks"]}
        assert checks["remapped_rows.pending"]["verdict"] == "fail"
        assert checks["present"]["verdict"] == "pass" and checks["dcgm"]["verdict"] == "not_applicable"
        assert "remapped_rows.pending" in rem["state_reason"]

        # Quarantined: taint, cordon and the node condition stay.
        assert TAINT in gpu_node.taints() and gpu_node.cordoned()
        condition = gpu_healthy(gpu_node)
        assert (condition["status"], condition["reason"]) == ("False", "Xid119")
        assert gpu_uuid(0) in condition["message"]

        await hook.wait_for(2)
        failed = [b for b in hook.bodies if b["event"] == "failed"]
        assert len(failed) == 1
        assert f"{gpu_uuid(0)}: remapped_rows.pending" in failed[0]["data"]["detail"]
        assert "remapped_rows.pending" in failed[0]["text"]  # what a person reads

    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    step_failed = next(e for e in audit if e["kind"] == "step.failed")
    assert step_failed["data"]["output"]["failed"] == {gpu_uuid(0): ["remapped_rows.pending"]}


async def test_a_gpu_that_passes_the_gate_returns_with_gpuhealthy_true(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    trainers(gpu_node)
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 1, xid="119"))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded", rem["state_reason"]
    validate = next(s for s in rem["steps"] if s["name"] == "validate")
    assert validate["output"]["verdict"] == "pass"
    assert validate["output"]["gpus"][0]["uuid"] == gpu_uuid(1)
    assert validate["output"]["dcgm_level"] == 2
    condition = gpu_healthy(gpu_node)
    assert (condition["status"], condition["reason"]) == ("True", "Recovered")
    assert not gpu_node.taints() and not gpu_node.cordoned()
    # The condition went False, then True, each through nodes/status.
    writes = [c for c in gpu_node.fake.writes("nodes") if c.subresource == "status" and c.ok]
    assert [c.body["status"]["conditions"][0]["status"] for c in writes] == ["False", "True"]

"""Nothing returns to service without proof, and what does not heal climbs the escalation ladder.

Controller on the strict fake API server, a real sidecar on fake NVML, the bundled definitions. The store's
clock is moved by hand so that a gate that waits (ResumeLater) is looked at again without sleeping.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from remediator.actions.reboot import NOT_REBOOTED
from tests.engine.conftest import Cluster
from tests.gpu_e2e.conftest import NODE, GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.gpu_e2e.test_reset import trainers
from tests.helpers import am_alert, am_payload
from tests.notify.receiver import receiver
from tests.sidecar.fakenvml import gpu_uuid

XID79_TAINT = {"key": "remediator.io/gpu-unhealthy", "value": "xid-79", "effect": "NoSchedule"}


class Clock:
    """Moves the store's clock (due times, windows) forward without sleeping."""

    def __init__(self, cluster: Cluster) -> None:
        self.offset = timedelta()
        real = cluster.rt.repo.clock

        def now() -> datetime:
            return real() + self.offset

        cluster.rt.repo.clock = now

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


def gpu_healthy(node: GpuNode) -> dict[str, Any]:
    conditions = (node.fake.node(node.name) or {})["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "GPUHealthy")


def node_label(node: GpuNode, key: str) -> str | None:
    labels: dict[str, str] = (node.fake.node(node.name) or {})["metadata"].get("labels") or {}
    return labels.get(key)


async def remediations(cluster: Cluster) -> list[dict[str, Any]]:
    rows = (await cluster.api.get("/api/v1/remediations")).json()
    out = []
    for row in sorted(rows, key=lambda r: r["created_at"]):
        out.append((await cluster.api.get(f"/api/v1/remediations/{row['id']}")).json())
    return out


def steps_of(rem: dict[str, Any], phase: str) -> list[tuple[str, str]]:
    return [(s["name"], s["status"]) for s in rem["steps"] if s["phase"] == phase]


async def test_xid79_returns_only_after_a_new_boot_and_a_passed_gate_on_every_gpu(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    trainers(gpu_node)
    booted = ((gpu_node.fake.node(NODE) or {})["status"]["nodeInfo"])["bootID"]
    async with receiver() as hook:
        cluster: Cluster = await gpu_cluster(notify_webhook_url=hook.url)
        clock = Clock(cluster)
        alert = am_alert(gpu_alert_labels("GPUXidError", 0, xid="79", err_code="79"))
        await cluster.post(am_payload(alert))
        await cluster.settle()
        [rem] = await remediations(cluster)
        assert (rem["playbook"], rem["state"]) == ("reboot-node", "succeeded"), rem["state_reason"]
        assert rem["context"]["node"]["boot_id"] == booted
        assert XID79_TAINT in gpu_node.taints() and gpu_node.cordoned()
        assert gpu_healthy(gpu_node)["status"] == "False"

        # The alert resolves (an exporter restart looks exactly like this): no reboot, so nothing is undone.
        await cluster.post(am_payload(am_alert(alert["labels"], status="resolved")))
        await cluster.settle()
        clock.advance(60)
        await cluster.settle()
        [rem] = await remediations(cluster)
        assert rem["state"] == "reverting"
        assert rem["state_reason"].startswith(NOT_REBOOTED) and booted in rem["state_reason"]
        assert steps_of(rem, "revert") == [("gate:rebooted", "running")]
        assert XID79_TAINT in gpu_node.taints() and gpu_node.cordoned()
        assert gpu_healthy(gpu_node)["status"] == "False"
        assert node_label(gpu_node, "remediator.io/state") == "reboot-required"

        # Rebooted, not Ready yet: still waiting, with the new reason.
        new_boot = gpu_node.fake.reboot_node(NODE, ready=False)
        clock.advance(60)
        await cluster.settle()
        [rem] = await remediations(cluster)
        assert rem["state"] == "reverting" and "waiting for Ready" in rem["state_reason"]
        assert XID79_TAINT in gpu_node.taints()

        # Ready: the gate validates every GPU of the node, then the quarantine is lifted.
        gpu_node.fake.set_node_ready(NODE, True)
        clock.advance(60)
        await cluster.settle()
        [rem] = await remediations(cluster)
        assert rem["state"] == "reverted", rem["state_reason"]
        revert = steps_of(rem, "revert")
        assert revert[:2] == [("gate:rebooted", "succeeded"), ("gate:validate", "succeeded")]
        rebooted = next(s for s in rem["steps"] if s["name"] == "gate:rebooted")["output"]
        assert (rebooted["boot_id_before"], rebooted["boot_id_after"]) == (booted, new_boot)
        validated = next(s for s in rem["steps"] if s["name"] == "gate:validate")["output"]
        assert sorted(g["uuid"] for g in validated["gpus"]) == [gpu_uuid(0), gpu_uuid(1)]
        assert XID79_TAINT not in gpu_node.taints() and not gpu_node.cordoned()
        assert node_label(gpu_node, "remediator.io/state") is None
        assert (gpu_healthy(gpu_node)["status"], gpu_healthy(gpu_node)["reason"]) == ("True", "Recovered")

        await hook.wait_for(4)
        events = [b["event"] for b in hook.bodies]
        assert events.count("return_waiting") == 2  # once per new reason, not once per look
        waiting = next(b for b in hook.bodies if b["event"] == "return_waiting")
        assert NOT_REBOOTED in waiting["data"]["detail"]

    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    waits = [e["data"]["reason"] for e in audit if e["kind"] == "revert.waiting"]
    assert len(waits) == 2 and waits[0].startswith(NOT_REBOOTED) and "waiting for Ready" in waits[1]


async def test_a_gate_that_fails_after_the_reboot_keeps_the_node_and_escalates_to_replace(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    trainers(gpu_node)
    gpu_node.sidecar.nvml.set("gpu.0.serial", "1654923008123")
    gpu_node.sidecar.nvml.set("gpu.0.vbios", "96.00.A5.00.01")
    async with receiver() as hook:
        cluster: Cluster = await gpu_cluster(notify_webhook_url=hook.url)
        clock = Clock(cluster)
        alert = am_alert(gpu_alert_labels("GPUXidError", 0, xid="79", err_code="79"))
        await cluster.post(am_payload(alert))
        await cluster.settle()
        await cluster.post(am_payload(am_alert(alert["labels"], status="resolved")))
        await cluster.settle()

        gpu_node.sidecar.nvml.set("gpu.0.remap.pending", 1)  # the GPU came back with a row remap pending
        gpu_node.fake.reboot_node(NODE)
        clock.advance(60)
        await cluster.settle()

        first, second = await remediations(cluster)
        assert (first["playbook"], first["state"]) == ("reboot-node", "failed")
        assert first["state_reason"].startswith("return to service refused: gate validate failed")
        assert "remapped_rows.pending" in first["state_reason"]
        assert steps_of(first, "revert") == [("gate:rebooted", "succeeded"), ("gate:validate", "failed")]
        # Nothing was undone: the node stays quarantined (the replace rung re-labels the same taint).
        assert [t["key"] for t in gpu_node.taints()] == ["remediator.io/gpu-unhealthy"] and gpu_node.cordoned()
        assert gpu_healthy(gpu_node)["status"] == "False"

        # The next rung: replace (rma-gpu) for the same GPU, with the history and the failed gate.
        assert (second["playbook"], second["rule"], second["state"]) == ("rma-gpu", "escalation:gate-failed",
                                                                          "succeeded")
        escalation = second["escalation"]
        assert (escalation["from"], escalation["reason"], escalation["rung"]) == (first["id"], "gate_failed", 3)
        assert escalation["gate"]["failed"] == {gpu_uuid(0): ["remapped_rows.pending"]}
        assert [h["remediation"] for h in escalation["history"]] == [first["id"]]
        assert node_label(gpu_node, "remediator.io/state") == "replace"

        await hook.wait_for(6)
        rma = [b for b in hook.bodies if b["event"] == "rma_report"]
        assert len(rma) == 1
        text = rma[0]["data"]["message"]
        for fact in ("1654923008123", "96.00.A5.00.01", "remapped_rows.pending", "GPUXidError"):
            assert fact in text, (fact, text)
        events = [b["event"] for b in hook.bodies]
        assert "return_refused" in events and "escalated" in events
    assert cluster.rt.metrics.registry.get_sample_value(
        "remediator_remediation_outcomes_total", {"playbook": "reboot-node", "outcome": "escalated"}) == 1


async def test_a_fault_ten_minutes_after_a_good_reset_goes_to_the_reboot_rung(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    trainers(gpu_node)
    cluster: Cluster = await gpu_cluster()
    clock = Clock(cluster)
    labels = gpu_alert_labels("GPUXidError", 1, xid="48", err_code="48")
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()
    [reset] = await remediations(cluster)
    assert (reset["playbook"], reset["state"]) == ("reset-gpu", "succeeded"), reset["state_reason"]

    clock.advance(600)  # the same GPU faults again 10 minutes later
    again = am_alert({**labels, "xid": "48"}, starts_at="2026-12-02T10:10:00Z")
    again["fingerprint"] = "0000000000000048"
    await cluster.post(am_payload(again))
    await cluster.settle()
    first, second = await remediations(cluster)
    assert first["id"] == reset["id"]
    assert (second["playbook"], second["rule"]) == ("reboot-node", "escalation:recurrence")
    escalation = second["escalation"]
    assert escalation["from"] == reset["id"] and escalation["reason"] == "recurrence"
    assert escalation["rung"] == 2 and 600 <= escalation["recurrence_seconds"] < 700

    recurrences = cluster.rt.metrics.registry.get_sample_value(
        "remediator_recurrences_total",
        {"playbook": "reset-gpu", "xid": "48", "model": "NVIDIA H200", "window": "24h"},
    )
    assert recurrences == 1
    assert cluster.rt.metrics.registry.get_sample_value(
        "remediator_remediation_outcomes_total", {"playbook": "reset-gpu", "outcome": "recurred"}) == 1

    report = (await cluster.api.get("/api/v1/reports/effectiveness?window=24h")).json()
    [recurrence] = report["recurrences"]
    assert recurrence["remediation_id"] == reset["id"] and recurrence["recurred_by"] == second["id"]
    assert 600 <= recurrence["time_to_recurrence_seconds"] < 700


async def test_the_latencies_and_outcomes_are_measured(gpu_cluster: MakeGpuCluster, gpu_node: GpuNode) -> None:
    trainers(gpu_node)
    cluster: Cluster = await gpu_cluster()
    clock = Clock(cluster)
    labels = gpu_alert_labels("GPUXidError", 1, xid="48", err_code="48")
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()
    registry = cluster.rt.metrics.registry

    def count(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    assert count("remediator_time_to_quarantine_seconds_count", playbook="reset-gpu") == 1
    assert count("remediator_time_to_return_seconds_count", playbook="reset-gpu") == 1  # it lifted its own

    # Healed once its recurrence window passes with no new fault of that GPU, counted once.
    sweep = cluster.worker.outcomes
    assert await sweep.maybe_sweep() == 0  # the first sweep only marks where counting starts
    clock.advance(25 * 3600)
    assert await sweep.maybe_sweep() == 1
    assert await sweep.sweep(cluster.rt.repo.clock()) == 0
    assert count("remediator_remediation_outcomes_total", playbook="reset-gpu", outcome="healed") == 1

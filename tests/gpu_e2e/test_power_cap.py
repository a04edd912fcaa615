"""A hot GPU: alert -> controller -> node sidecar over HTTP -> fake NVML holds the lower limit; resolve restores it."""

from __future__ import annotations

from tests.engine.conftest import Cluster
from tests.gpu_e2e.conftest import GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.gpu_e2e.test_gate_unknown import Agent, agent_down  # noqa: F401  (fixture)
from tests.gpu_e2e.test_return_to_service import Clock
from tests.helpers import am_alert, am_payload
from tests.sidecar.fakenvml import gpu_uuid

DEFAULT_MW = 700_000


async def test_hot_gpu_is_capped_and_the_old_limit_returns_when_the_alert_resolves(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    cluster: Cluster = await gpu_cluster()
    gpu_node.sidecar.nvml.set("gpu.0.temp", 91)
    labels = gpu_alert_labels("GPUTemperatureHigh", 0)
    await cluster.post(am_payload(am_alert(labels, annotations={"summary": "GPU 0 at 91 C"})))
    await cluster.settle()

    assert gpu_node.power_limit_mw(0) == 560_000  # 80 % of the 700 W default
    assert gpu_node.power_limit_mw(1) == DEFAULT_MW
    rem = await cluster.only_remediation()
    assert (rem["rule"], rem["playbook"], rem["state"]) == ("thermal-high", "power-cap-gpu", "succeeded")
    assert rem["gpu_uuid"] == gpu_uuid(0)
    [cap] = [s for s in rem["steps"] if s["name"] == "cap"]
    assert cap["output"]["previous_watts"] == 700.0 and cap["output"]["new_watts"] == 560.0
    assert not gpu_node.cordoned() and not gpu_node.taints() and not gpu_node.evicted()

    await cluster.post(am_payload(am_alert(labels, status="resolved")))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "reverted"
    assert gpu_node.power_limit_mw(0) == DEFAULT_MW
    reverts = [(s["action"], s["status"]) for s in rem["steps"] if s["phase"] == "revert"]
    assert reverts == [("restore_power_limit", "succeeded")]
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    writes = [
        (e["kind"], e["data"]["resource"], e["data"]["outcome"]) for e in audit if e["kind"].startswith("sidecar.")
    ]
    assert [w[1].rsplit("/", 1)[-1] for w in writes] == ["power-limit", "restore"]
    assert all(kind == "sidecar.post" and outcome == "ok" for kind, _, outcome in writes)


async def test_critical_heat_caps_harder_clamped_to_the_gpu_minimum(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    gpu_node.sidecar.nvml.set("gpu.1.min_limit", 500_000)  # 60 % of 700 W is below this GPU's floor
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUTemperatureCritical", 1))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert (rem["rule"], rem["state"]) == ("thermal-critical", "succeeded")
    [cap] = [s for s in rem["steps"] if s["name"] == "cap"]
    assert cap["output"]["requested_watts"] == 420.0 and cap["output"]["clamped"] is True
    assert gpu_node.power_limit_mw(1) == 500_000
    assert gpu_node.power_limit_mw(0) == DEFAULT_MW


async def test_an_alert_naming_only_the_gpu_index_caps_that_gpu(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUTemperatureHigh", 1, with_uuid=False))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded"
    assert rem["context"]["gpu_uuid"] == gpu_uuid(1) and rem["context"]["pod_source"] == "sidecar"
    assert gpu_node.power_limit_mw(1) == 560_000
    assert gpu_node.power_limit_mw(0) == DEFAULT_MW


async def test_the_limit_is_not_touched_when_the_sidecar_cannot_be_reached(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode, agent_down: Agent  # noqa: F811
) -> None:
    """An unreachable node agent is a transient failure: the cap step retries it within the budget (1 s here,
    REMEDIATOR_TRANSIENT_BUDGET_S), then the remediation waits for the agent, never failed, and caps the GPU
    once the agent answers."""
    cluster: Cluster = await gpu_cluster(port=agent_down.port, transient_budget_s=1)
    clock = Clock(cluster)
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUTemperatureHigh", 0))))
    await cluster.settle(60)

    rem = await cluster.only_remediation()
    assert (rem["playbook"], rem["state"]) == ("power-cap-gpu", "running")
    assert rem["state_reason"].startswith("waiting: node agent unreachable since "), rem["state_reason"]
    assert [(s["name"], s["status"]) for s in rem["steps"]] == [("cap", "running")]
    assert rem["crashes"] == 0
    assert rem["context"]["pod_source"] == "node" and "unreachable" in rem["context"]["sidecar_error"]
    assert gpu_node.power_limit_mw(0) == DEFAULT_MW

    # The agent is back: the next look caps the GPU and the remediation ends as usual.
    agent_down.up()
    clock.advance(cluster.settings.dependency_recheck_s)
    await cluster.settle(60)
    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded", rem["state_reason"]
    assert gpu_node.power_limit_mw(0) == 560_000 and gpu_node.power_limit_mw(1) == DEFAULT_MW
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    assert [e["kind"] for e in audit if e["kind"] in ("remediation.waiting", "remediation.resumed")] == [
        "remediation.waiting", "remediation.resumed"]


async def test_a_limit_an_operator_set_after_the_cap_survives_the_revert_and_is_reported(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    cluster: Cluster = await gpu_cluster()
    labels = gpu_alert_labels("GPUTemperatureHigh", 0)
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()
    assert gpu_node.power_limit_mw(0) == 560_000
    gpu_node.sidecar.nvml.set("gpu.0.power_limit", 620_000)  # an operator raises it by hand

    await cluster.post(am_payload(am_alert(labels, status="resolved")))
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "reverted"
    assert gpu_node.power_limit_mw(0) == 620_000
    [restore] = [s for s in rem["steps"] if s["phase"] == "revert"]
    assert (restore["action"], restore["status"]) == ("restore_power_limit", "succeeded")
    out = restore["output"]
    assert out["changed"] is False and out["left_alone"] is True
    assert (out["reason"], out["current_watts"], out["capped_watts"]) == ("changed by another actor", 620.0, 560.0)
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    [event] = [e for e in audit if e["kind"] == "step.succeeded" and e["data"]["action"] == "restore_power_limit"]
    assert event["data"]["output"]["left_alone"] is True
    assert event["data"]["output"]["reason"] == "changed by another actor"


async def test_a_cap_never_raises_a_limit_already_lower(gpu_cluster: MakeGpuCluster, gpu_node: GpuNode) -> None:
    gpu_node.sidecar.nvml.set("gpu.0.power_limit", 400_000)  # an operator's 400 W, below the 80 % cap (560 W)
    cluster: Cluster = await gpu_cluster()
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUTemperatureHigh", 0))))
    await cluster.settle()

    rem = await cluster.only_remediation()
    [cap] = [s for s in rem["steps"] if s["name"] == "cap"]
    assert cap["output"]["left_alone"] is True and cap["output"]["new_watts"] == 400.0
    assert "left as it is" in cap["output"]["message"]
    assert gpu_node.power_limit_mw(0) == 400_000
    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    assert not [e for e in audit if e["kind"] == "sidecar.post"]  # nothing was written to the GPU

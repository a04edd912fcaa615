"""Unknown is not failed: a return gate that cannot read the node agent keeps the node and pages a person.

Controller on the strict fake API server, real sidecar processes on fake NVML, the bundled definitions, a
webhook receiver on 127.0.0.1 for the pages. Xid 79 quarantines node gpu-a (reboot-node); the alert resolves;
the kubelet writes a new boot ID through nodes/status while the node agent is down (a DaemonSet rollout) or
answers 5xx (the driver is not loaded yet). The gate then has no verdict: the node stays quarantined, no
`rma-gpu` starts, no `remediator.io/state=replace` label is written, one page names the node, the agent and
what could not be read, and the gate is looked at again with a doubling backoff. When the agent answers and
the GPUs pass, the node returns to service as usual; a GPU that the agent reads as broken still climbs the
ladder. The store's clock is moved by hand, so the backoff is followed without sleeping.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from remediator.actions.base import ActionContext, ActionResult
from remediator.actions.validation import ValidateGpu
from remediator.engine.executor import GATE_UNKNOWN
from remediator.errors import GateUnknown
from tests.engine.conftest import Cluster, MakeCluster
from tests.gpu_e2e.conftest import NODE, NODE_IP, GpuNode, MakeGpuCluster, gpu_alert_labels
from tests.gpu_e2e.test_reset import TAINT, forward, trainers
from tests.gpu_e2e.test_return_to_service import XID79_TAINT, Clock, gpu_healthy, node_label, remediations, steps_of
from tests.helpers import am_alert, am_payload
from tests.notify.receiver import Receiver, receiver
from tests.sidecar.conftest import TOKEN, SidecarEnv, SidecarProcess, free_port

pytestmark = pytest.mark.timeout(240)

STATE_LABEL = "remediator.io/state"


class Agent:
    """The node agent where the controller dials it (NODE_IP, a port of its own): a second real sidecar process
    on the module sidecar's fake NVML and kubelet, stopped and started as a DaemonSet rollout would."""

    def __init__(self, env: SidecarEnv) -> None:
        self.port = free_port(NODE_IP)
        self.process = SidecarProcess(env.dir, env.sidecar.env, NODE_IP)

    @property
    def address(self) -> str:
        return f"{NODE_IP}:{self.port}"

    def up(self) -> None:
        self.process.start(self.port)

    def down(self) -> None:
        self.process.stop()


@pytest.fixture
def agent_down(sidecar: SidecarEnv) -> Iterator[Agent]:
    """The node agent where the controller dials it, not started (a DaemonSet rollout): `up()` brings it back."""
    agent = Agent(sidecar)
    try:
        yield agent
    finally:
        agent.down()


@pytest.fixture
def agent(sidecar: SidecarEnv) -> Iterator[Agent]:
    agent = Agent(sidecar)
    agent.up()
    try:
        yield agent
    finally:
        agent.down()


@pytest.fixture
async def controller(make_cluster: MakeCluster, agent: Agent) -> AsyncIterator[Any]:
    """make(**settings): the controller, dialling the agent's port with the shared token."""
    made: list[Cluster] = []

    async def make(**overrides: Any) -> Cluster:
        cluster: Cluster = await make_cluster(sidecar_port=agent.port, sidecar_token=TOKEN, real_gates=True,
                                              **overrides)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        if cluster.rt.sidecar is not None:
            await cluster.rt.sidecar.aclose()


async def kubelet_reboots(node: GpuNode) -> str:
    """What the kubelet writes after a reboot, through nodes/status over HTTP: a new boot ID, Ready."""
    boot_id = str(uuid.uuid4())
    patch = {"status": {"nodeInfo": {"bootID": boot_id}, "conditions": [{"type": "Ready", "status": "True"}]}}
    async with httpx.AsyncClient(base_url=node.fake.url) as http:
        answer = await http.patch(f"/api/v1/nodes/{node.name}/status", content=json.dumps(patch),
                                  headers={"Content-Type": "application/strategic-merge-patch+json"})
    assert answer.status_code == 200, answer.text
    assert (node.fake.node(node.name) or {})["status"]["nodeInfo"]["bootID"] == boot_id
    return boot_id


async def quarantined_and_resolved(cluster: Cluster, node: GpuNode, clock: Clock) -> dict[str, Any]:
    """Xid 79 on GPU 0: reboot-node quarantines the node; the alert resolves; the gate waits for a reboot."""
    alert = am_alert(gpu_alert_labels("GPUXidError", 0, xid="79", err_code="79"))
    await cluster.post(am_payload(alert))
    await cluster.settle()
    [rem] = await remediations(cluster)
    assert (rem["playbook"], rem["state"]) == ("reboot-node", "succeeded"), rem["state_reason"]
    await cluster.post(am_payload(am_alert(alert["labels"], status="resolved")))
    await cluster.settle()
    clock.advance(60)
    await cluster.settle()
    [rem] = await remediations(cluster)
    assert steps_of(rem, "revert") == [("gate:rebooted", "running")]
    return rem


async def spell(cluster: Cluster, rem_id: str) -> dict[str, Any]:
    """The validate gate step's unknown spell as stored (since, looks, agent, symptom, detail)."""
    return await spell_of(cluster, rem_id, "gate:validate")


async def spell_of(cluster: Cluster, rem_id: str, step: str) -> dict[str, Any]:
    row = next(r for r in await cluster.rt.repo.steps(rem_id) if r.name == step)
    found: dict[str, Any] = (row.progress or {}).get(GATE_UNKNOWN) or {}
    return found


def still_quarantined(node: GpuNode) -> None:
    assert XID79_TAINT in node.taints() and node.cordoned()
    assert gpu_healthy(node)["status"] == "False"
    assert node_label(node, STATE_LABEL) == "reboot-required"  # never `replace`


def verdicts(cluster: Cluster, verdict: str) -> float:
    value = cluster.rt.metrics.registry.get_sample_value(
        "remediator_gate_verdicts_total", {"playbook": "reboot-node", "verdict": verdict})
    return value or 0.0


def pages(hook: Receiver, event: str) -> list[dict[str, Any]]:
    return [b for b in hook.bodies if b["event"] == event]


async def arrived(hook: Receiver, event: str) -> list[dict[str, Any]]:
    """The pages of `event`, once at least one has arrived (they are sent in the background)."""
    async with asyncio.timeout(20):
        while not pages(hook, event):
            hook.arrived.clear()
            await hook.arrived.wait()
    return pages(hook, event)


async def test_an_agent_down_through_the_reboot_keeps_the_node_pages_once_and_returns_when_it_answers(
    controller: Any, gpu_node: GpuNode, agent: Agent
) -> None:
    trainers(gpu_node)
    async with receiver() as hook:
        cluster: Cluster = await controller(notify_webhook_url=hook.url)
        clock = Clock(cluster)
        rem = await quarantined_and_resolved(cluster, gpu_node, clock)

        agent.down()  # the DaemonSet rolls: no agent listens on the node's port
        await kubelet_reboots(gpu_node)
        clock.advance(60)
        await cluster.settle()

        [rem] = await remediations(cluster)  # one remediation: no rma-gpu was started
        assert rem["state"] == "reverting"
        assert rem["state_reason"].startswith(f"gate unknown: agent {agent.address} unreachable since "), \
            rem["state_reason"]
        assert steps_of(rem, "revert") == [("gate:rebooted", "succeeded"), ("gate:validate", "running")]
        still_quarantined(gpu_node)
        assert (await spell(cluster, rem["id"]))["looks"] == 1

        # Looked at again after 15 s, then 30 s, then 60 s: never sooner.
        for delay, looks in ((15, 2), (30, 3), (60, 4)):
            clock.advance(delay - 5)
            await cluster.settle()
            assert (await spell(cluster, rem["id"]))["looks"] == looks - 1
            clock.advance(5)
            await cluster.settle()
            assert (await spell(cluster, rem["id"]))["looks"] == looks
        [rem] = await remediations(cluster)
        assert rem["state"] == "reverting" and rem["state_reason"].startswith("gate unknown: ")
        still_quarantined(gpu_node)
        assert verdicts(cluster, "unknown") == 4 and verdicts(cluster, "failed") == 0

        [page] = await arrived(hook, "gate_unknown")  # once, not once per look
        detail = page["data"]["detail"]
        assert NODE in detail and agent.address in detail and "unreachable" in detail
        assert "does not escalate" in detail
        assert not pages(hook, "escalated") and not pages(hook, "return_refused") and not pages(hook, "failed")

        # The agent is back and the GPUs pass: the node returns to service as usual.
        agent.up()
        clock.advance(120)
        await cluster.settle()
        [rem] = await remediations(cluster)
        assert rem["state"] == "reverted", rem["state_reason"]
        assert steps_of(rem, "revert")[:2] == [("gate:rebooted", "succeeded"), ("gate:validate", "succeeded")]
        assert XID79_TAINT not in gpu_node.taints() and not gpu_node.cordoned()
        assert node_label(gpu_node, STATE_LABEL) is None
        assert gpu_healthy(gpu_node)["status"] == "True"
        assert verdicts(cluster, "passed") == 1

        [recovered] = await arrived(hook, "gate_recovered")
        assert agent.address in recovered["data"]["detail"] and "4 look(s)" in recovered["data"]["detail"]

    audit = (await cluster.api.get(f"/api/v1/audit?remediation={rem['id']}")).json()
    unknown = [e for e in audit if e["kind"] == "gate.unknown"]
    assert len(unknown) == 1  # the timeline says it once per spell
    assert unknown[0]["data"]["reason"].startswith(f"gate unknown: agent {agent.address} unreachable since ")
    assert unknown[0]["data"]["agent"] == agent.address
    assert not [c for c in gpu_node.fake.writes("nodes") if STATE_LABEL in json.dumps(c.body or {})
                and "replace" in json.dumps(c.body or {})]


async def test_an_agent_answering_5xx_is_unknown_too(controller: Any, gpu_node: GpuNode, agent: Agent) -> None:
    trainers(gpu_node)
    async with receiver() as hook:
        cluster: Cluster = await controller(notify_webhook_url=hook.url)
        clock = Clock(cluster)
        rem = await quarantined_and_resolved(cluster, gpu_node, clock)

        # Rebooted, and the agent answers, but the driver is not loaded yet: NVML unreadable, 503.
        gpu_node.sidecar.nvml.set("err.nvmlSystemGetDriverVersion", 9)
        await kubelet_reboots(gpu_node)
        clock.advance(60)
        await cluster.settle()
        clock.advance(15)
        await cluster.settle()

        [rem] = await remediations(cluster)
        assert rem["state"] == "reverting"
        assert rem["state_reason"].startswith(f"gate unknown: agent {agent.address} answering 503 since "), \
            rem["state_reason"]
        assert "DRIVER_NOT_LOADED" in rem["state_reason"]
        still_quarantined(gpu_node)
        assert verdicts(cluster, "unknown") == 2
        [page] = await arrived(hook, "gate_unknown")
        assert agent.address in page["data"]["detail"] and "DRIVER_NOT_LOADED" in page["data"]["detail"]

        gpu_node.sidecar.nvml.set("err.nvmlSystemGetDriverVersion", 0)  # the driver loaded
        clock.advance(30)
        await cluster.settle()
        [rem] = await remediations(cluster)
        assert rem["state"] == "reverted", rem["state_reason"]
        assert XID79_TAINT not in gpu_node.taints() and node_label(gpu_node, STATE_LABEL) is None
        assert not pages(hook, "escalated")


async def test_a_gpu_read_as_lost_once_the_agent_answers_still_climbs_the_ladder(
    controller: Any, gpu_node: GpuNode, agent: Agent
) -> None:
    trainers(gpu_node)
    cluster: Cluster = await controller()
    clock = Clock(cluster)
    await quarantined_and_resolved(cluster, gpu_node, clock)

    agent.down()
    await kubelet_reboots(gpu_node)
    clock.advance(60)
    await cluster.settle()
    [rem] = await remediations(cluster)
    assert rem["state_reason"].startswith("gate unknown: ")

    gpu_node.sidecar.nvml.set("gpu.0.lost", 1)  # the GPU did not survive the reboot: NVML says it is lost
    agent.up()
    clock.advance(15)
    await cluster.settle()
    first, second = await remediations(cluster)
    assert (first["playbook"], first["state"]) == ("reboot-node", "failed")
    assert first["state_reason"].startswith("return to service refused: gate validate failed"), first["state_reason"]
    assert (second["playbook"], second["rule"]) == ("rma-gpu", "escalation:gate-failed")
    assert second["escalation"]["gate"]["verdict"] == "fail"
    assert "present" in second["escalation"]["gate"]["failed"][gpu_alert_labels("x", 0)["UUID"]]
    assert verdicts(cluster, "unknown") == 1 and verdicts(cluster, "failed") == 1


class AgentAwayFor(ValidateGpu):
    """validate_gpu whose agent is away for the first `looks` looks (as an unreachable agent is reported),
    then the real gate against the real sidecar: for the gate as a forward step of reset-gpu."""

    def __init__(self, looks: int) -> None:
        self.left = looks

    async def run(self, ctx: ActionContext, params: Any) -> ActionResult:
        if self.left:
            self.left -= 1
            raise GateUnknown("127.0.0.3:9410", "unreachable", "sidecar http://127.0.0.3:9410/v1/gpus unreachable")
        return await super().run(ctx, params)


async def test_a_forward_gate_with_no_verdict_waits_instead_of_failing_and_escalating(
    gpu_cluster: MakeGpuCluster, gpu_node: GpuNode
) -> None:
    trainers(gpu_node)
    cluster: Cluster = await gpu_cluster()
    assert isinstance(cluster.rt.actions, dict)
    cluster.rt.actions["validate_gpu"] = AgentAwayFor(2)
    clock = Clock(cluster)
    await cluster.post(am_payload(am_alert(gpu_alert_labels("GPUXidError", 1, xid="119"))))
    await cluster.settle()

    rem = await cluster.only_remediation()  # no reboot-node escalation
    assert (rem["playbook"], rem["state"]) == ("reset-gpu", "running")
    assert rem["state_reason"].startswith("gate unknown: agent 127.0.0.3:9410 unreachable since ")
    assert forward(rem)[-1] == ("validate", "running")
    assert TAINT in gpu_node.taints() and gpu_node.cordoned()

    clock.advance(15)
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "running" and (await spell_of(cluster, rem["id"], "validate"))["looks"] == 2
    clock.advance(30)
    await cluster.settle()
    rem = await cluster.only_remediation()
    assert rem["state"] == "succeeded", rem["state_reason"]
    assert not gpu_node.taints() and not gpu_node.cordoned()
    registry = cluster.rt.metrics.registry
    assert registry.get_sample_value("remediator_gate_verdicts_total",
                                     {"playbook": "reset-gpu", "verdict": "unknown"}) == 2
    assert registry.get_sample_value("remediator_gate_verdicts_total",
                                     {"playbook": "reset-gpu", "verdict": "passed"}) == 1

"""From a GPU metric to the cluster, with the real Prometheus and Alertmanager and `remediator serve`.

Each test adds its own node to the shared fake cluster and its own GPUs to the exporter, changes a metric
and waits (with a deadline) for what the controller does on the fake API server or through the sidecar.
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from tests.e2e.conftest import SIDECAR_IP
from tests.e2e.stack import Stack, eventually
from tests.sidecar.fakenvml import gpu_uuid

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

TAINT_KEY = "remediator.io/gpu-unhealthy"
XID = "DCGM_FI_DEV_XID_ERRORS"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
DEFAULT_LIMIT_MW = 700_000


def node_uuid(node: str, index: int) -> str:
    return f"GPU-{zlib.crc32(node.encode()):08x}-0000-4000-8000-{index:012x}"


def gpu_node(
    stack: Stack, name: str, ip: str, pods: int = 2, *, nvml_uuids: bool = False, err_shape: str = "legacy",
    host_label: str = "Hostname",
) -> None:
    """A GPU node running `pods` GPU pods of one Deployment, a CPU pod and a DaemonSet pod; GPU i is pod i's.

    With `nvml_uuids` the GPUs carry the fake NVML's UUIDs (the node whose sidecar runs on fake NVML).
    `err_shape` and `host_label` pick the dcgm-exporter generation the node's series look like.
    """
    fake = stack.fake
    fake.add_node(name, ip=ip, labels={"nvidia.com/gpu.present": "true"})
    deployment = fake.add_deployment(f"{name}-trainer", "ml")
    rs = fake.add_replicaset(f"{name}-trainer-abc", "ml", replicas=pods, deployment=deployment)
    for i in range(pods):
        fake.add_pod(f"{name}-trainer-{i}", "ml", node=name, gpus=1, owner=rs)
        uuid = gpu_uuid(i) if nvml_uuids else node_uuid(name, i)
        stack.exporter.add_gpu(name, i, uuid, pod=f"{name}-trainer-{i}", namespace="ml", container="trainer",
                               err_shape=err_shape, host_label=host_label)
    fake.add_pod(f"{name}-web", "apps", node=name, gpus=0)
    ds = fake.add_daemonset(f"{name}-dcgm-exporter", "monitoring")
    fake.add_pod(f"{name}-dcgm-exporter-x", "monitoring", node=name, gpus=0, owner=ds)


def quarantine_taint(reason: str) -> dict[str, Any]:
    return {"key": TAINT_KEY, "value": reason, "effect": "NoSchedule"}


def evictions(stack: Stack, node: str) -> list[str]:
    return [c.name or "" for c in stack.fake.requests("evict") if c.ok and (c.name or "").startswith(f"{node}-")]


async def test_xid79_taints_cordons_and_drains_and_the_reboot_returns_the_node(stack: Stack) -> None:
    node = "gpu-xid"
    gpu_node(stack, node, SIDECAR_IP, nvml_uuids=True)  # its sidecar runs the return gate on fake NVML
    await stack.exporter.scraped(2)  # Prometheus holds the 0 the Xid rule's changes() compares with

    stack.exporter.set(node, 0, XID, 79)
    await eventually(lambda: quarantine_taint("xid-79") in stack.taints(node), timeout=30,
                     what=f"the xid-79 taint on {node}")
    rem = await stack.remediation_in(node, {"succeeded"})
    assert stack.cordoned(node)
    assert sorted(evictions(stack, node)) == [f"{node}-trainer-0", f"{node}-trainer-1"]
    assert rem["alert_labels"]["alertname"] == "GPUXidError" and rem["alert_labels"]["xid"] == "79"
    # The alert names the GPU and, from dcgm-exporter's pod mapping, the pod the kubelet gave it.
    assert rem["alert_labels"]["UUID"] == gpu_uuid(0)
    assert (rem["alert_labels"]["pod"], rem["alert_labels"]["namespace"]) == (f"{node}-trainer-0", "ml")

    # Xid 79 (fallen off the bus): the alert stays firing while the gauge holds 79, long after the value
    # stopped changing.
    await stack.exporter.scraped(3)
    assert not (await stack.remediation(rem["id"]))["alert_resolved"]
    assert stack.cordoned(node)
    # The gauge drops to 0 with no reboot (what an exporter restart looks like): the alert resolves, but
    # without a new boot ID the node stays quarantined and the remediation says it waits for a reboot.
    stack.exporter.set(node, 0, XID, 0)
    await eventually(lambda: _resolved(stack, rem["id"]), timeout=30, what="the resolved Xid alert to arrive")
    waiting = await stack.remediation_in(node, {"reverting"})
    await eventually(lambda: _waiting_for_reboot(stack, rem["id"]), timeout=30, what="the reboot wait")
    assert stack.cordoned(node) and quarantine_taint("xid-79") in stack.taints(node)
    assert waiting["id"] == rem["id"]

    # The node reboots (the kubelet reports a new boot ID): the gate validates its GPUs, the quarantine goes.
    stack.fake.reboot_node(node)
    done = await stack.remediation_in(node, {"reverted"}, timeout=90)
    gates = [(s["name"], s["status"]) for s in done["steps"] if s["name"].startswith("gate:")]
    assert gates == [("gate:rebooted", "succeeded"), ("gate:validate", "succeeded")]
    assert not stack.cordoned(node)
    assert not [t for t in stack.taints(node) if t["key"] == TAINT_KEY]


async def _waiting_for_reboot(stack: Stack, rem_id: str) -> bool:
    return str((await stack.remediation(rem_id))["state_reason"] or "").startswith("waiting for a reboot")


async def _resolved(stack: Stack, rem_id: str) -> bool:
    return bool((await stack.remediation(rem_id))["alert_resolved"])


async def test_hot_gpu_is_capped_at_84_held_at_80_and_restored_once_settled_below_73(stack: Stack) -> None:
    sidecar = stack.sidecar
    assert sidecar is not None
    node = "gpu-hot"
    gpu_node(stack, node, SIDECAR_IP, nvml_uuids=True)

    def limit(gpu: int) -> int:
        return int(sidecar.nvml.get(f"gpu.{gpu}.power_limit"))

    stack.exporter.set(node, 0, TEMP, 84)
    await eventually(lambda: limit(0) < DEFAULT_LIMIT_MW, timeout=30,
                     what=f"a lower power limit on {node} GPU 0 (sidecar log: {sidecar.sidecar.log})")
    assert limit(1) == DEFAULT_LIMIT_MW

    async def capping() -> list[dict[str, Any]]:
        found = []
        for summary in await stack.remediations(node=node):
            rem = await stack.remediation(summary["id"])
            if any(s["action"] == "power_limit" and s["phase"] == "forward" for s in rem["steps"]):
                found.append(rem)
        return found

    capped = await eventually(capping, timeout=10, what=f"the remediation that capped {node}")
    assert len(capped) == 1 and capped[0]["gpu_uuid"] == gpu_uuid(0)
    assert capped[0]["rule"] == "thermal-high" and capped[0]["alert_labels"]["alertname"] == "GPUTemperatureHigh"
    capped_mw = limit(0)

    # 80 C is below the 83 C cap threshold but above 73 C: the alert stays firing and the cap is held.
    stack.exporter.set(node, 0, TEMP, 80)
    await stack.exporter.scraped(10)
    assert limit(0) == capped_mw
    held = await stack.remediation(capped[0]["id"])
    assert held["state"] == "succeeded" and not held["alert_resolved"]
    assert len(await capping()) == 1

    # 72 C: once the GPU has been below 73 C for the (shortened) settling time the alert resolves and the
    # original limit comes back.
    stack.exporter.set(node, 0, TEMP, 72)
    await eventually(lambda: limit(0) == DEFAULT_LIMIT_MW, timeout=30, what=f"{node} GPU 0 back at 700 W")
    rem = await eventually(
        lambda: _in_state(stack, capped[0]["id"], "reverted"), timeout=30,
        what=f"remediation {capped[0]['id']} reverted",
    )
    assert any(s["action"] == "restore_power_limit" and s["status"] == "succeeded" for s in rem["steps"])


async def _in_state(stack: Stack, rem_id: str, state: str) -> dict[str, Any] | None:
    rem = await stack.remediation(rem_id)
    return rem if rem["state"] == state else None


async def test_alertmanager_retry_after_503_delivers_once_the_store_is_back_and_is_processed_once(
    stack: Stack,
) -> None:
    node = "gpu-store"
    gpu_node(stack, node, "127.0.0.11", pods=1)
    await stack.exporter.scraped(2)
    refused = "remediator_webhook_duration_seconds_count"
    refused_before = await stack.controller_metric(refused, code="503")

    with stack.store_unavailable():
        since = stack.exporter.set(node, 0, XID, 79)
        await eventually(lambda: stack.bare.first(since=since, Hostname=node), timeout=30,
                         what="Alertmanager to send the Xid alert")
        # Alertmanager was answered 503 and tried again within its notify attempt.
        await eventually(
            lambda: _above(stack.controller_metric(refused, code="503"), refused_before + 1), timeout=20,
            what="two 503 answers to Alertmanager while the store is down",
        )
        assert await stack.remediations(node=node) == []
        assert quarantine_taint("xid-79") not in stack.taints(node)

    rem = await stack.remediation_in(node, {"succeeded"})
    assert [t for t in stack.taints(node) if t["key"] == TAINT_KEY] == [quarantine_taint("xid-79")]
    assert evictions(stack, node) == [f"{node}-trainer-0"]

    # Alertmanager keeps re-sending the firing alert; the repeats are stored and not processed again.
    repeated = "remediator_alerts_repeated_total"
    seen = await stack.controller_metric(repeated)
    await eventually(lambda: _above(stack.controller_metric(repeated), seen), timeout=20,
                     what="a repeated delivery of the alert")
    rems = await stack.remediations(node=node)
    assert [(r["id"], r["state"], r["linked_alerts"]) for r in rems] == [(rem["id"], "succeeded", 0)]
    assert evictions(stack, node) == [f"{node}-trainer-0"]
    taint_writes = [c for c in stack.fake.requests("patch", "nodes", name=node) if c.ok and TAINT_KEY in str(c.body)]
    assert len(taint_writes) == 1


async def _above(value: Any, floor: float) -> bool:
    return bool(await value > floor)


# -- dcgm-exporter 3.3.6 and later: the Xid gauge carries err_code/err_msg, one series per code -----------


def pod_events(stack: Stack, pod: str, reason: str) -> list[Any]:
    return [
        c for c in stack.fake.requests("create", "events", namespace="ml")
        if c.ok and (c.body or {}).get("involvedObject", {}).get("name") == pod
        and (c.body or {}).get("reason") == reason
    ]


async def remediations_of(stack: Stack, node: str) -> list[dict[str, Any]]:
    return [await stack.remediation(r["id"]) for r in await stack.remediations(node=node)]


@pytest.mark.parametrize(("node", "ip", "host_label"), [
    ("gpu-ec-upper", "127.0.0.20", "Hostname"),
    ("gpu-ec-lower", "127.0.0.21", "hostname"),
])
async def test_err_code_xid13_notifies_the_pod_then_xid48_on_the_same_gpu_resets_it(
    stack: Stack, node: str, ip: str, host_label: str,
) -> None:
    gpu_node(stack, node, ip, err_shape="err_code", host_label=host_label)
    await stack.exporter.scraped(2)

    stack.exporter.set(node, 0, XID, 13)
    await eventually(lambda: pod_events(stack, f"{node}-trainer-0", "GPUApplicationXid"), timeout=30,
                     what=f"an Xid 13 event on {node}-trainer-0")
    [first] = await remediations_of(stack, node)
    assert (first["rule"], first["playbook"]) == ("xid-application", "notify-pods")
    assert first["alert_labels"]["xid"] == "13" and first["alert_labels"]["Hostname"] == node
    assert first["gpu_uuid"] == node_uuid(node, 0)
    assert TAINT_KEY not in [t["key"] for t in stack.taints(node)]

    # A second, different Xid on the same GPU: a new series, a new alert, a second remediation.
    stack.exporter.set(node, 0, XID, 48)
    await eventually(lambda: quarantine_taint("xid-48") in stack.taints(node), timeout=30,
                     what=f"the xid-48 taint on {node}")
    rems = await remediations_of(stack, node)
    second = [r for r in rems if r["id"] != first["id"]]
    assert len(rems) == 2 and len(second) == 1
    assert (second[0]["rule"], second[0]["playbook"]) == ("xid-reset-gpu", "reset-gpu")
    assert second[0]["alert_labels"]["xid"] == "48" and second[0]["gpu_uuid"] == node_uuid(node, 0)


async def test_xid13_names_the_exporters_pod_when_the_node_agent_cannot_be_reached(stack: Stack) -> None:
    """dcgm-exporter with pod mapping labels GPU 3's series with trainer-3-7d9f8-1x3; the shipped rule keeps
    the labels through real Prometheus and Alertmanager, and with no node agent on the node the remediation
    names that pod (pod_source exporter) and tells only it."""
    node = "gpu-exporter-pods"
    fake = stack.fake
    fake.add_node(node, ip="127.0.0.25", labels={"nvidia.com/gpu.present": "true"})  # no node agent there
    deployment = fake.add_deployment("trainer-3", "ml")
    rs = fake.add_replicaset("trainer-3-7d9f8", "ml", replicas=2, deployment=deployment)
    for index, pod in ((3, "trainer-3-7d9f8-1x3"), (4, "trainer-3-7d9f8-9qk")):
        fake.add_pod(pod, "ml", node=node, gpus=1, owner=rs)
        stack.exporter.add_gpu(node, index, node_uuid(node, index), pod=pod, namespace="ml", container="trainer",
                               err_shape="err_code")
    await stack.exporter.scraped(2)

    stack.exporter.set(node, 3, XID, 13)
    await eventually(lambda: pod_events(stack, "trainer-3-7d9f8-1x3", "GPUApplicationXid"), timeout=30,
                     what="an Xid 13 event on trainer-3-7d9f8-1x3")
    rem = await stack.remediation_in(node, {"succeeded"})
    assert (rem["rule"], rem["playbook"]) == ("xid-application", "notify-pods")
    labels = rem["alert_labels"]
    assert (labels["xid"], labels["UUID"]) == ("13", node_uuid(node, 3))
    assert (labels["pod"], labels["namespace"], labels["container"]) == ("trainer-3-7d9f8-1x3", "ml", "trainer")
    context = rem["context"]
    assert context["pod_source"] == "exporter" and "unreachable" in context["sidecar_error"]
    assert [p["name"] for p in context["pods"]] == ["trainer-3-7d9f8-1x3"]
    assert [p["name"] for p in context["gpu_pods"][node_uuid(node, 3)]] == ["trainer-3-7d9f8-1x3"]
    assert not pod_events(stack, "trainer-3-7d9f8-9qk", "GPUApplicationXid")  # GPU 4's pod: not told


async def test_err_code_xid79_with_lower_case_hostname_quarantines_the_node(stack: Stack) -> None:
    node = "gpu-ec-79"
    gpu_node(stack, node, "127.0.0.22", err_shape="err_code", host_label="hostname")
    await stack.exporter.scraped(2)
    stack.exporter.set(node, 1, XID, 79)
    await eventually(lambda: quarantine_taint("xid-79") in stack.taints(node), timeout=30,
                     what=f"the xid-79 taint on {node}")
    rem = await stack.remediation_in(node, {"succeeded"})
    assert (rem["rule"], rem["playbook"]) == ("xid-reboot-node", "reboot-node")
    assert rem["alert_labels"]["xid"] == "79" and rem["alert_labels"]["UUID"] == node_uuid(node, 1)
    assert stack.cordoned(node)


@pytest.mark.parametrize(("node", "ip", "err_shape"), [
    ("gpu-restart-ec", "127.0.0.23", "err_code"),
    ("gpu-restart-legacy", "127.0.0.24", "legacy"),
])
async def test_an_exporter_restart_raises_nothing(stack: Stack, node: str, ip: str, err_shape: str) -> None:
    gpu_node(stack, node, ip, err_shape=err_shape, host_label="hostname")
    await stack.exporter.scraped(3)
    since = stack.exporter.set(node, 0, TEMP, 40)
    await stack.exporter.restart(node, scrapes=3)
    await stack.exporter.scraped(6)
    assert stack.bare.first(since=since, Hostname=node) is None
    assert await stack.remediations(node=node) == []
    assert stack.taints(node) == []

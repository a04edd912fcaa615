"""Kernel log lines fed to a running node sidecar raise GPUXidError through the shipped rules, the real
Prometheus and Alertmanager, and reach the webhook receivers and the controller, without any DCGM series."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import SIDECAR_IP
from tests.e2e.stack import Stack, eventually
from tests.sidecar.fakenvml import gpu_uuid

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

NODE = "gpu-node-1"  # the sidecar's REMEDIATOR_NODE_NAME (tests/sidecar/conftest.py)
LABELS = {
    "alertname": "GPUXidError",
    "Hostname": NODE,
    "UUID": gpu_uuid(0),
    "gpu": "0",
    "pci_bus_id": "00000000:18:00.0",
    "xid": "13",
    "severity": "critical",
}
XID_13 = (
    "NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on "
    "(GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
)


class Kmsg:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sequence = 7000

    def write(self, message: str) -> None:
        self.sequence += 1
        with self.path.open("a") as fh:
            fh.write(f"4,{self.sequence},{self.sequence * 1000},-;{message}\n")


def xid_alerts(stack: Stack, since: float) -> list[dict[str, Any]]:
    return [
        alert
        for arrival in stack.bare.arrivals
        if arrival.at >= since
        for alert in arrival.alerts(alertname="GPUXidError", Hostname=NODE)
        if alert["status"] == "firing"
    ]


async def test_kernel_xid_lines_alert_through_prometheus_and_alertmanager(stack: Stack) -> None:
    assert stack.sidecar is not None
    stack.fake.add_node(NODE, ip=SIDECAR_IP, labels={"nvidia.com/gpu.present": "true"})
    stack.fake.add_pod(f"{NODE}-trainer-0", "ml", node=NODE, gpus=1)

    async with httpx.AsyncClient(timeout=5.0) as client:
        async def scraped() -> bool:
            query = {"query": "gpu_remediator_gpus_visible"}
            r = await client.get(f"{stack.prometheus_url}/api/v1/query", params=query)
            return bool(r.json()["data"]["result"])

        await eventually(scraped, timeout=30, what="Prometheus to scrape the sidecar")

    kmsg = Kmsg(stack.sidecar.dir / "kmsg")
    start = time.monotonic()
    kmsg.write("pci 0000:18:00.0: [10de:2335] type 00 class 0x030200")
    kmsg.write(XID_13)
    await eventually(lambda: xid_alerts(stack, start), timeout=30, what="GPUXidError from the sidecar's counter")
    (alert, *_) = xid_alerts(stack, start)
    assert alert["labels"] == LABELS, "exactly the labels the DCGM-based GPUXidError carries"
    assert alert["annotations"]["events"] == "1"

    rem = await stack.remediation_in(NODE, {"succeeded", "failed", "awaiting_approval", "running", "planned"})
    assert rem["alert_labels"]["xid"] == "13" and rem["alert_labels"]["UUID"] == gpu_uuid(0)

    # The same Xid again: the counter's second increase is visible as the alert's count, re-sent by
    # Alertmanager (the alert keeps its identity: one alert, one remediation).
    again = time.monotonic()
    kmsg.write(XID_13)
    await eventually(
        lambda: any(a["annotations"].get("events") == "2" for a in xid_alerts(stack, again)),
        timeout=30,
        what="the repeated Xid 13 to reach the receiver with a count of 2",
    )
    # The DCGM-based GPUXidError for the same Xid (the same labels, as dcgm-exporter's rule renders them)
    # arriving at the same Alertmanager is the same alert: still one alert and one remediation.
    async with httpx.AsyncClient(timeout=5.0) as client:
        dcgm = {**LABELS}
        posted = await client.post(
            f"{stack.alertmanager_url}/api/v2/alerts",
            json=[{"labels": dcgm, "annotations": {"summary": "from DCGM_FI_DEV_XID_ERRORS"}}],
        )
        assert posted.status_code == 200, posted.text
        both = time.monotonic()
        await eventually(lambda: xid_alerts(stack, both), timeout=30, what="the next notification")
        listed = (await client.get(f"{stack.alertmanager_url}/api/v2/alerts",
                                   params={"filter": ['alertname="GPUXidError"', f'Hostname="{NODE}"']})).json()
    assert [a["labels"] for a in listed] == [LABELS]
    for arrival in stack.bare.arrivals:
        if arrival.at >= both:
            assert len(arrival.alerts(alertname="GPUXidError", Hostname=NODE)) <= 1
    assert len(await stack.remediations(node=NODE)) == 1

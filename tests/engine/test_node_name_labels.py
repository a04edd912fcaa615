"""An alert whose node label is not a node name starts nothing and never reaches the API server."""

from __future__ import annotations

import pytest

from tests.engine.conftest import Cluster, MakeCluster
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload


@pytest.mark.parametrize("hostname", [".", "..", "a/b", "x,spec.nodeName=y"])
async def test_an_invalid_node_label_is_no_target_with_its_reason(
    make_cluster: MakeCluster, fake_kube: FakeKube, hostname: str
) -> None:
    fake_kube.add_node("gpu-node-1", labels={"nvidia.com/gpu.present": "true"}, gpus=8)
    cluster: Cluster = await make_cluster()
    before = len(fake_kube.calls)
    labels = {"alertname": "GPUXidError", "Hostname": hostname, "gpu": "0", "xid": "79",
              "UUID": "GPU-8e6a1c2d-0000-4000-8000-000000000001", "modelName": "NVIDIA H200"}
    await cluster.post(am_payload(am_alert(labels)))
    await cluster.settle()

    assert (await cluster.api.get("/api/v1/remediations")).json() == []
    audit = (await cluster.api.get("/api/v1/audit")).json()
    [event] = [e for e in audit if e["kind"] == "alert.no_target"]
    assert event["data"]["problem"].startswith("label Hostname: ")
    assert "RFC 1123 subdomain" in event["data"]["problem"]
    assert fake_kube.calls[before:] == []
    assert not (fake_kube.node("gpu-node-1") or {})["spec"].get("unschedulable")

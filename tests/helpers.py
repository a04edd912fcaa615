"""Builders shared by tests: Alertmanager payloads as Alertmanager 0.25 sends them."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]


def am_alert(
    labels: dict[str, str],
    *,
    status: str = "firing",
    annotations: dict[str, str] | None = None,
    starts_at: str = "2026-12-02T10:00:00Z",
) -> dict[str, Any]:
    return {
        "status": status,
        "labels": labels,
        "annotations": annotations or {},
        "startsAt": starts_at,
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-12-02T10:30:00Z",
        "generatorURL": "http://prometheus:9090/graph",
        "fingerprint": fingerprint(labels),
    }


def am_payload(*alerts: dict[str, Any], status: str | None = None) -> dict[str, Any]:
    common = alerts[0]["labels"] if alerts else {}
    return {
        "version": "4",
        "groupKey": '{}:{alertname="' + common.get("alertname", "") + '"}',
        "truncatedAlerts": 0,
        "status": status or alerts[0]["status"],
        "receiver": "gpu-remediator",
        "groupLabels": {"alertname": common.get("alertname", "")},
        "commonLabels": dict(common),
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": list(alerts),
    }


def shipped_xid_alert(
    node: str, xid: int, *, uuid: str = "GPU-8e6a1c2d-0000-4000-8000-000000000001", gpu: str = "0",
    pci_bus_id: str = "00000000:1B:00.0",
) -> dict[str, Any]:
    """A firing GPUXidError exactly as the shipped rule (deploy/monitoring/prometheus-rules.yaml) delivers it:
    labels Hostname, UUID, gpu, pci_bus_id, xid, alertname, severity, and its three annotations."""
    lasting = xid in (79, 167)
    labels = {"alertname": "GPUXidError", "severity": "critical", "Hostname": node, "UUID": uuid, "gpu": gpu,
              "pci_bus_id": pci_bus_id, "xid": str(xid)}
    return am_alert(labels, annotations={
        "summary": f"GPU {gpu} ({uuid}) on {node} reported Xid {xid}",
        "description": f"GPU {gpu} ({pci_bus_id}) of {node} reported Xid {xid}; "
                       + ("it stays lost until the node is rebooted." if lasting else "the alert lasts 10 minutes."),
        "xid_persistence": "until-reboot" if lasting else "10m",
    })


def xid_labels(node: str, xid: int, uuid: str = "GPU-8e6a1c2d-0000-4000-8000-000000000001", gpu: str = "0",
               **extra: str) -> dict[str, str]:
    return {"alertname": "GPUXidError", "Hostname": node, "UUID": uuid, "gpu": gpu, "modelName": "NVIDIA H200",
            "pci_bus_id": "00000000:1B:00.0", "xid": str(xid), **extra}

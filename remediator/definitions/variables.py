"""The names that step templates and CEL `when` conditions can read, with the shape of each.

The engine builds these values (remediator.engine.planning.build_variables); the loader uses the top-level
names to reject, at load time, a template or condition that reads anything else. Values are plain JSON-like
data (str, int, bool, None, lists, mappings) so both Jinja2 and CEL see the same thing.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CONTEXT_ALWAYS", "TEMPLATE_VARIABLES"]

TEMPLATE_VARIABLES: Final[dict[str, dict[str, str]]] = {
    "alert": {
        "name": "str: the alertname label",
        "status": "str: firing | resolved",
        "kind": "str: xid | ecc_dbe | ecc_sbe | thermal | power | idle | other",
        "labels": "dict[str, str]: all alert labels",
        "annotations": "dict[str, str]: all alert annotations",
        "starts_at": "str: ISO 8601 start time",
        "fingerprint": "str: Alertmanager fingerprint",
        "summary": "str: the summary annotation, else description, else the alertname",
    },
    "gpu": {
        "uuid": "str | None: GPU UUID (label UUID)",
        "index": "str | None: GPU index on the node (label gpu)",
        "pci_bus_id": "str | None",
        "model": "str | None: e.g. NVIDIA H100 80GB HBM3 (label modelName)",
        "device": "str | None: e.g. nvidia0",
    },
    "node": {
        "name": "str | None: Kubernetes node name",
    },
    "xid": {
        "code": "int | None: the Xid code; every xid field is None when the alert has no Xid",
        "resolution": "str | None: the catalog's bucket: NVIDIA's immediate action, or the project's where NVIDIA "
        "publishes none, e.g. RESET_GPU",
        "nvidia": "str | None: NVIDIA's published immediate action; None where NVIDIA publishes none",
        "action": "str | None: the immediate action this alert asks for (the message decoded for 45, 74, 144-150, "
        "154; else `resolution`); the rules route on it as label xid_action",
        "cause": "str | None: short cause from the Xid catalog",
        "description": "str | None: NVIDIA's description",
        "recovery_action": "str | None: GPU_RESET | NODE_REBOOT | DRAIN_P2P | DRAIN_AND_RESET (Xid 154 text)",
    },
    "context": {
        "pods": "list[dict]: pods on the affected GPU or node, each with namespace, name, owners",
        "pod_source": "str: where the pod list came from (e.g. sidecar, kube, labels)",
        "node": "dict: always `name`; with cluster access also labels, taints, unschedulable, internal_ip, "
        "boot_id, ready (or `missing`): read those with .get('key') or `| default(...)`",
        "...": "further keys gathered by the engine when it can (gpu_uuid, gpu_pods, sidecar_error; for an alert "
        "naming a MIG GPU instance gpu_instance, instance_pods, instance_uuid or gpu_instance_error): read "
        "them with .get('key') or `| default(...)`",
    },
    "params": {
        "...": "the rule's params over the playbook's params defaults",
    },
    "steps": {
        "<step name>": "dict: output of an earlier step that succeeded, by step name",
    },
    "escalation": {
        "from": "str | None: the remediation this one escalates (ESCALATION_LADDER); None for a first run",
        "reason": "str | None: gate_failed | recurrence",
        "rung": "int | None: 1-based position of this playbook on the ladder",
        "ladder": "list[str]: the ladder's playbooks",
        "recurrence_seconds": "float | None: time from the previous return to service to this fault",
        "history": "list[dict]: the GPU's (else node's) faults, oldest first: at, alertname, xid, gpu, "
        "playbook, outcome, remediation",
        "gate": "dict | None: the failed validation gate's output (verdict, failed, gpus)",
    },
    "target": {
        "kind": "str: node | gpu | gpu_instance | namespace",
        "key": "str: stable identity, e.g. gpu:node-1/GPU-abc, gpu_instance:node-1/GPU-abc/gi5",
        "node": "str | None",
        "gpu_uuid": "str | None",
        "gpu_instance": "int | None: the MIG GPU instance of a gpu_instance target",
        "namespace": "str | None",
    },
}

# The part of `context` that every remediation carries, with or without cluster access (plan-only mode
# without a cluster gathers only this): key -> its own always-carried keys, or None where the value is
# opaque (a list, a string). Anything else under `context` (node.boot_id, node.labels, gpu_pods, ...) is
# there only when the engine could read it, so `remediator check` refuses a template that reads it
# unguarded (templates.check_template); `.get('key')`, `| default(...)` and `is defined` guard it.
CONTEXT_ALWAYS: Final[dict[str, dict[str, None] | None]] = {
    "pods": None,
    "pod_source": None,
    "node": {"name": None},
}

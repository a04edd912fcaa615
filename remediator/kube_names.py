"""The controller's Kubernetes vocabulary: every label, taint and annotation name it writes or reads.

One place, so that the actions that write a name, the engine and guardrails that read it, the UI that
explains it and the docs agree; a rename is one edit. Pure: names and tiny predicates over plain mappings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = [
    "EXCLUDE_LABEL",
    "FIELD_MANAGER",
    "GPU_RESOURCE",
    "IDLE_ANNOTATION",
    "OWNER_ANNOTATION",
    "QUARANTINE_TAINT",
    "REMEDIATION_ANNOTATION",
    "STATE_LABEL",
    "excluded",
]

# The quarantine taint (`remediator.io/gpu-unhealthy=<reason>:NoSchedule`) the shipped playbooks put on a node.
QUARANTINE_TAINT: Final = "remediator.io/gpu-unhealthy"
# What a human must do with the node: reboot-required, replace, ... (label).
STATE_LABEL: Final = "remediator.io/state"
# The remediation that cordoned a node (annotation): an uncordon lifts only its own cordon.
REMEDIATION_ANNOTATION: Final = "remediator.io/remediation"
# Opt-out (`=true`) on a node (no remediation at all) or a namespace (its pods are never drained).
EXCLUDE_LABEL: Final = "remediator.io/exclude"
# Namespace annotation naming who owns its workloads (a Slack channel or user).
OWNER_ANNOTATION: Final = "remediator.io/owner"
# Pod annotation put on pods that hold a GPU idle.
IDLE_ANNOTATION: Final = "remediator.io/idle-gpu"
GPU_RESOURCE: Final = "nvidia.com/gpu"
FIELD_MANAGER: Final = "remediator"


def excluded(marks: Mapping[str, str] | None) -> bool:
    """Do these labels (or annotations) opt the object out of remediation?"""
    return (marks or {}).get(EXCLUDE_LABEL) == "true"

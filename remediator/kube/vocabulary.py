"""The controller's Kubernetes vocabulary: every label, taint and annotation name it writes or reads.

One place, so that the actions that write a name, the engine and guardrails that read it, the UI that
explains it and the docs agree; a rename is one edit. Pure: names and tiny predicates over plain mappings.

It also holds the syntax of what the controller may write: qualified names (label, taint and annotation
keys) and label values, as predicates (`qualified_name_problem`, `label_value_problem`) and as pydantic
types (`TaintKey`, `LabelValue`, ...) that an action's parameters declare, so values that alert text may feed
into are checked once, when the parameters are parsed, and a bad one fails the step instead of the cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Final

from pydantic import AfterValidator

__all__ = [
    "EXCLUDE_LABEL",
    "FIELD_MANAGER",
    "GPU_RESOURCE",
    "IDLE_ANNOTATION",
    "OWNER_ANNOTATION",
    "QUARANTINE_TAINT",
    "REMEDIATION_ANNOTATION",
    "STATE_LABEL",
    "AnnotationKey",
    "LabelKey",
    "LabelValue",
    "TaintKey",
    "TaintValue",
    "excluded",
    "label_value_problem",
    "qualified_name_problem",
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


_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes qualified name (`[dns-prefix/]name`), or None if it is one."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return "the prefix must be a lowercase DNS subdomain of at most 253 characters"
    if not name or len(name) > 63 or not _NAME.match(name):
        return "the name must be 1-63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a valid label (or taint) value, or None: empty, or <=63 of [A-Za-z0-9_.-]."""
    if value == "":
        return None
    if len(value) > 63 or not _NAME.match(value):
        return "must be at most 63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"
    return None


def _annotation_key_problem(key: str) -> str | None:
    """Annotation keys follow the qualified-name rules, but their prefix may be written in capitals."""
    return qualified_name_problem(key.lower())


def _syntax(what: str, problem: Callable[[str], str | None]) -> AfterValidator:
    def check(value: str) -> str:
        found = problem(value)
        if found is not None:
            raise ValueError(f"invalid {what} {value!r}: {found}")
        return value

    return AfterValidator(check)


TaintKey = Annotated[str, _syntax("taint key", qualified_name_problem)]
TaintValue = Annotated[str, _syntax("taint value", label_value_problem)]
LabelKey = Annotated[str, _syntax("label key", qualified_name_problem)]
LabelValue = Annotated[str, _syntax("label value", label_value_problem)]
AnnotationKey = Annotated[str, _syntax("annotation key", _annotation_key_problem)]

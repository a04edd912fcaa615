"""Kubernetes syntax rules the fake apiserver enforces on every write, as a real apiserver would.

Written independently of the production validators on purpose: a fake that shared the controller's
code could never catch the controller's mistakes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "Invalid",
    "check_annotations",
    "check_event",
    "check_labels",
    "check_node_taints",
    "check_object_name",
    "label_value_problem",
    "node_condition_time_problem",
    "qualified_name_problem",
]

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_ANNOTATIONS_BYTES = 256 * 1024


class Invalid(Exception):
    """One or more field errors; the server answers 422 with them as causes."""

    def __init__(self, causes: list[tuple[str, str]]) -> None:
        self.causes = causes
        super().__init__("; ".join(f"{field}: {message}" for field, message in causes))


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a valid label/annotation/taint key (`[prefix/]name`), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"prefix part {prefix!r} must be a lowercase RFC 1123 subdomain of at most 253 characters"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.match(name):
        return "name part must consist of alphanumerics, '-', '_' or '.', and start and end alphanumeric"
    return None


def label_value_problem(value: object) -> str | None:
    """Why `value` is not a valid label value (<=63 of [A-Za-z0-9_.-], alnum ends, or empty), or None."""
    if not isinstance(value, str):
        return "must be a string"
    if value == "":
        return None
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _NAME.match(value):
        return "must consist of alphanumeric characters, '-', '_' or '.', and start and end alphanumeric"
    return None


def check_object_name(kind: str, name: str) -> list[tuple[str, str]]:
    """Namespaces need DNS labels; everything else here takes DNS subdomains."""
    pattern = _DNS_LABEL if kind == "Namespace" else _DNS_SUBDOMAIN
    limit = 63 if kind == "Namespace" else 253
    if not name or len(name) > limit or not pattern.match(name):
        return [("metadata.name", f"Invalid value: {name!r}: must be a lowercase RFC 1123 name")]
    return []


def check_labels(labels: object) -> list[tuple[str, str]]:
    if labels is None:
        return []
    if not isinstance(labels, Mapping):
        return [("metadata.labels", "must be a map of strings")]
    causes = []
    for key, value in labels.items():
        problem = qualified_name_problem(str(key))
        if problem:
            causes.append(("metadata.labels", f"Invalid value: {key!r}: {problem}"))
        problem = label_value_problem(value)
        if problem:
            causes.append((f"metadata.labels[{key}]", f"Invalid value: {value!r}: {problem}"))
    return causes


def check_annotations(annotations: object) -> list[tuple[str, str]]:
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping):
        return [("metadata.annotations", "must be a map of strings")]
    causes = []
    size = 0
    for key, value in annotations.items():
        problem = qualified_name_problem(str(key).lower())
        if problem:
            causes.append(("metadata.annotations", f"Invalid value: {key!r}: {problem}"))
        if not isinstance(value, str):
            causes.append((f"metadata.annotations[{key}]", "must be a string"))
            continue
        size += len(str(key)) + len(value)
    if size > MAX_ANNOTATIONS_BYTES:
        causes.append(("metadata.annotations", f"Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"))
    return causes


def check_node_taints(taints: object) -> list[tuple[str, str]]:
    if taints is None:
        return []
    if not isinstance(taints, list):
        return [("spec.taints", "must be a list")]
    causes = []
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(taints):
        where = f"spec.taints[{index}]"
        if not isinstance(taint, Mapping):
            causes.append((where, "must be an object"))
            continue
        key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
        problem = qualified_name_problem(str(key))
        if problem:
            causes.append((f"{where}.key", f"Invalid value: {key!r}: {problem}"))
        problem = label_value_problem(value)
        if problem:
            causes.append((f"{where}.value", f"Invalid value: {value!r}: {problem}"))
        if effect not in TAINT_EFFECTS:
            causes.append(
                (f"{where}.effect", f"Unsupported value: {effect!r}: supported values: {TAINT_EFFECTS}")
            )
        if (key, effect) in seen:
            causes.append(
                (where, f"Duplicate value: taints must be unique by key and effect pair ({key}:{effect})")
            )
        seen.add((str(key), str(effect)))
    return causes


def check_event(event: Mapping[str, Any], namespace: str) -> list[tuple[str, str]]:
    """core/v1 Event rules (the legacy path: no eventTime)."""
    causes = []
    involved = event.get("involvedObject") or {}
    if not involved.get("kind") or not involved.get("name"):
        causes.append(("involvedObject", "Required value: kind and name"))
    involved_ns = involved.get("namespace") or ""
    if involved_ns == "" and namespace not in ("", "default"):
        causes.append(("involvedObject.namespace", "Invalid value: '': does not match event.namespace"))
    if involved_ns and involved_ns != namespace:
        causes.append(
            ("involvedObject.namespace", f"Invalid value: {involved_ns!r}: does not match event.namespace")
        )
    if event.get("type") not in (None, "Normal", "Warning"):
        causes.append(
            ("type", f"Unsupported value: {event.get('type')!r}: supported values: Normal, Warning")
        )
    if len(str(event.get("reason") or "")) > 128:
        causes.append(("reason", "Too long: must have at most 128 bytes"))
    if event.get("eventTime"):
        for field in ("reportingController", "reportingInstance", "action"):
            if not event.get(field):
                causes.append((field, "Required value"))
    return causes


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def node_condition_time_problem(node: Mapping[str, Any]) -> str | None:
    """Why a node condition's time cannot be decoded (a real apiserver answers 400: the body does not
    unmarshal into metav1.Time, which takes RFC 3339 only), or None."""
    for index, condition in enumerate(((node.get("status") or {}).get("conditions")) or []):
        if not isinstance(condition, Mapping):
            continue
        for key in ("lastHeartbeatTime", "lastTransitionTime"):
            value = condition.get(key)
            if value is not None and not (isinstance(value, str) and _RFC3339.fullmatch(value)):
                return (
                    f"Node in version \"v1\" cannot be handled as a Node: status.conditions[{index}].{key}: "
                    f"parsing time {value!r} as \"2006-01-02T15:04:05Z07:00\": not RFC 3339"
                )
    return None

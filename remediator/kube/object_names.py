"""Names that end up in URL paths or selectors: Kubernetes object names, namespaces, GPU UUIDs.

Alert labels are outside input. A node called `.` or `..` becomes `/api/v1/nodes/` or `/api/v1/` once an
HTTP client normalises the path, and a `,` or `=` in a field selector value adds a requirement of its
own. Every such value is checked here against the grammar the Kubernetes API server (or the node
sidecar) accepts before it becomes part of a request; the functions answer why a value is refused, or
None, so callers can say it in their own words. Pure: no I/O.
"""

from __future__ import annotations

import re

__all__ = [
    "GPU_UUID_PATTERN",
    "escape_field_selector_value",
    "gpu_uuid_problem",
    "namespace_problem",
    "object_name_problem",
]

MAX_SUBDOMAIN = 253
MAX_LABEL = 63

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_DNS_LABEL = re.compile(rf"^{_LABEL}$")
# What the node sidecar serves: GPU-<hex and dashes> or MIG-<hex and dashes>.
GPU_UUID_PATTERN = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]{8,64}$")


def _shown(value: str) -> str:
    return repr(value[:80] + ("..." if len(value) > 80 else ""))


def object_name_problem(name: str, what: str = "node name") -> str | None:
    """Why `name` is not an RFC 1123 subdomain (a node, pod or workload name), or None if it is one."""
    if not name:
        return f"empty {what}"
    if len(name) > MAX_SUBDOMAIN:
        return f"{what} is {len(name)} characters; an RFC 1123 subdomain has at most {MAX_SUBDOMAIN}"
    if not _SUBDOMAIN.fullmatch(name):
        return (
            f"{what} {_shown(name)} is not an RFC 1123 subdomain (lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)"
        )
    return None


def namespace_problem(namespace: str) -> str | None:
    """Why `namespace` is not an RFC 1123 label (at most 63 characters), or None if it is one."""
    if not namespace:
        return "empty namespace"
    if len(namespace) > MAX_LABEL or not _DNS_LABEL.fullmatch(namespace):
        return (
            f"namespace {_shown(namespace)} is not an RFC 1123 label (at most {MAX_LABEL} lowercase letters, "
            "digits and '-', starting and ending with a letter or digit)"
        )
    return None


def gpu_uuid_problem(uuid: str) -> str | None:
    """Why `uuid` is not a GPU or MIG UUID as NVML reports them, or None if it is one."""
    if not GPU_UUID_PATTERN.fullmatch(uuid):
        return f"not a GPU or MIG UUID: {_shown(uuid)} (expected GPU-... or MIG-...)"
    return None


def escape_field_selector_value(value: str) -> str:
    """A value escaped as the API server's field selector grammar wants it: `\\`, `,` and `=` get a
    backslash (apimachinery's fields.EscapeValue)."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")

"""metadata.managedFields as a real apiserver keeps them for non-apply writes (create, update, patch).

The controller tells a person's hand change from its own by the field manager that owns the field now, so
the fake must keep managedFields the way the apiserver's field manager does (structured-merge-diff's
`Updater.Update` plus the managed-fields updater), not leave them out:

- the manager is the request's `fieldManager` query parameter, else the User-Agent up to its first `/`
  (`kubectl/v1.30.0 (linux/amd64)` -> `kubectl`), as the apiserver derives it;
- entries are per (manager, operation, subresource); a write by manager M gives M the fields it added or
  changed, takes them from every other manager, and takes the fields it removed from everyone: a removed
  field is owned by no one afterwards (Kubernetes keeps no record of who removed a field);
- M's entry gets a new `time` only when the write gave M at least one field; an entry left owning nothing
  is dropped;
- lists are atomic (one field, owned whole: Node `spec.taints` is one) except the associative ones the
  strategic merge patch merges by key (`status.conditions` by `type`, containers by `name`, ...), whose
  items are fields of their own (`k:{"type":"Ready"}`);
- the server's own metadata (resourceVersion, uid, generation, creationTimestamp, managedFields) is never
  owned. A client cannot write managedFields through a patch: they are computed from the old object's.

The user who made a request is not part of managedFields on a real apiserver, and is not here either: the
fake records it on the request (`Call.user`), where a cluster's audit log would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.fakekube.copies import deep_copy
from tests.fakekube.patching import MERGE_LISTS

__all__ = ["manager_of", "owned_paths", "update_managed_fields"]

Path = tuple[str, ...]
_SERVER_OWNED = ("resourceVersion", "uid", "generation", "creationTimestamp", "managedFields",
                 "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")
_MAX_MANAGER = 128


def manager_of(params: Mapping[str, str], headers: Mapping[str, str]) -> str:
    """The request's field manager: `fieldManager`, else the User-Agent's first `/`-separated part."""
    given = params.get("fieldManager")
    if given:
        return given
    agent = next((v for k, v in headers.items() if k.lower() == "user-agent"), "") or "unknown"
    return agent.split("/", 1)[0][:_MAX_MANAGER]


def _leaves(value: Any, path: Path, plain: Path, out: dict[Path, Any]) -> None:
    if isinstance(value, Mapping):
        if not value and path:
            out[path] = {}
            return
        for key, child in value.items():
            if not path and key in ("apiVersion", "kind"):
                continue
            if plain == ("metadata",) and key in _SERVER_OWNED:
                continue
            _leaves(child, (*path, f"f:{key}"), (*plain, str(key)), out)
        return
    merge_key = MERGE_LISTS.get(plain)
    if isinstance(value, list) and merge_key:
        for item in value:
            if merge_key == "":
                out[(*path, f"v:{json.dumps(item, sort_keys=True, separators=(',', ':'))}")] = item
            elif isinstance(item, Mapping) and merge_key in item:
                key = f"k:{json.dumps({merge_key: item[merge_key]}, separators=(',', ':'))}"
                out[(*path, key, ".")] = None
                for field_name, child in item.items():
                    _leaves(child, (*path, key, f"f:{field_name}"), (*plain, "*", str(field_name)), out)
        return
    out[path] = value  # a scalar or an atomic list: one field


def _fields(obj: Mapping[str, Any], status_only: bool) -> dict[Path, Any]:
    out: dict[Path, Any] = {}
    _leaves(obj, (), (), out)
    if status_only:
        return {p: v for p, v in out.items() if p[0] == "f:status"}
    return {p: v for p, v in out.items() if p[0] != "f:status"}


def owned_paths(fields_v1: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """The leaf paths a fieldsV1 tree names (the inverse of `_tree`)."""
    found: set[Path] = set()
    for key, child in fields_v1.items():
        here = (*prefix, key)
        if isinstance(child, Mapping) and child:
            found |= owned_paths(child, here)
        else:
            found.add(here)
    return found


def _tree(paths: set[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(part, {})
    return root


def update_managed_fields(
    old: Mapping[str, Any], new: dict[str, Any], *, manager: str, api_version: str, now: str, subresource: str | None,
) -> None:
    """Set `new["metadata"]["managedFields"]` for a write of `old` -> `new` by `manager` (see the module doc)."""
    status_only = subresource == "status"
    before, after = _fields(old, status_only), _fields(new, status_only)
    taken = {p for p, v in after.items() if p not in before or before[p] != v}
    removed = {p for p in before if p not in after}
    entries = [deep_copy(dict(e)) for e in (old.get("metadata") or {}).get("managedFields") or []]
    key = (manager, "Update", subresource)
    kept: list[dict[str, Any]] = []
    mine: dict[str, Any] | None = None
    for entry in entries:
        owned = owned_paths(entry.get("fieldsV1") or {})
        if (entry.get("manager"), entry.get("operation"), entry.get("subresource")) == key:
            mine = entry
            continue
        rest = owned - taken - removed
        if rest != owned:
            entry["fieldsV1"] = _tree(rest)
        if rest:
            kept.append(entry)
    own = (owned_paths(mine.get("fieldsV1") or {}) if mine else set()) - removed
    if taken or mine is not None:
        entry = mine or {"manager": manager, "operation": "Update", "apiVersion": api_version}
        if subresource:
            entry["subresource"] = subresource
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = _tree(own | taken)
        if taken:
            entry["time"] = now
            entry["apiVersion"] = api_version
        if own | taken:
            kept.append(entry)
    new.setdefault("metadata", {})
    if kept:
        new["metadata"]["managedFields"] = kept
    else:
        new["metadata"].pop("managedFields", None)

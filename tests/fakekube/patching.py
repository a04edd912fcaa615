"""PATCH semantics of a real apiserver: strategic merge, JSON merge (RFC 7386) and JSON patch (RFC 6902).

Strategic merge differs from a plain recursive merge only through per-field list strategies. The table
below holds the ones for fields this project may touch; every other list is atomic (replaced whole), which
is what the apiserver does for Node.spec.taints. Directives this fake does not emulate are refused loudly
instead of being applied approximately.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.fakekube.copies import deep_copy

__all__ = ["PatchError", "UnsupportedPatch", "json_merge_patch", "json_patch", "strategic_merge_patch"]

# Lists merged by a key under strategic merge (path of field names -> merge key); "" means a set of scalars.
MERGE_LISTS: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): "",
    ("metadata", "ownerReferences"): "uid",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "template", "spec", "containers"): "name",
    ("spec", "template", "spec", "initContainers"): "name",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}


class PatchError(Exception):
    """The patch cannot be applied (answered as 422)."""


class UnsupportedPatch(Exception):
    """A construct the fake refuses to guess at (answered as 501 so tests notice)."""


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else (lists too) replaces."""
    if not isinstance(patch, Mapping):
        return deep_copy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Strategic merge for the fields in MERGE_LISTS; elsewhere identical to a JSON merge patch."""
    if not isinstance(patch, Mapping):
        return deep_copy(patch)
    for key in patch:
        if str(key).startswith("$"):
            raise UnsupportedPatch(
                f"strategic merge directive {key!r} at {'.'.join(path) or '.'} is not emulated"
            )
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        here = (*path, str(key))
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and here in MERGE_LISTS:
            result[key] = _merge_list(result.get(key) or [], value, MERGE_LISTS[here], here)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, here)
    return result


def _merge_list(current: list[Any], patch: list[Any], merge_key: str, path: tuple[str, ...]) -> list[Any]:
    if merge_key == "":
        return list(current) + [v for v in patch if v not in current]
    merged = [deep_copy(item) for item in current]
    for item in patch:
        if not isinstance(item, Mapping) or merge_key not in item:
            raise PatchError(f"{'.'.join(path)}: every element needs the merge key {merge_key!r}")
        if any(str(k).startswith("$") for k in item):
            raise UnsupportedPatch(f"strategic merge directive in {'.'.join(path)} is not emulated")
        for index, existing in enumerate(merged):
            if isinstance(existing, Mapping) and existing.get(merge_key) == item[merge_key]:
                merged[index] = strategic_merge_patch(existing, item, path)
                break
        else:
            merged.append(deep_copy(dict(item)))
    return merged


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise PatchError(f"path component {part!r} does not exist")
    return node


def _apply_op(doc: Any, op: Mapping[str, Any]) -> Any:
    kind, parts = op.get("op"), _pointer(str(op.get("path", "")))
    if not parts:
        raise UnsupportedPatch("JSON patch operations on the document root are not emulated")
    parent, last = _parent(doc, parts), parts[-1]
    if kind == "test":
        actual = parent[int(last)] if isinstance(parent, list) else parent.get(last, ...)
        if actual != op.get("value"):
            raise PatchError(f"testing value {op.get('path')} failed")
    elif kind == "remove":
        if isinstance(parent, list):
            del parent[int(last)]
        elif last in parent:
            del parent[last]
        else:
            raise PatchError(f"unable to remove nonexistent key: {last}")
    elif kind in ("add", "replace"):
        value = deep_copy(op.get("value"))
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(index, value)
            else:
                parent[index] = value
        else:
            if kind == "replace" and last not in parent:
                raise PatchError(f"replace operation does not apply: doc is missing key: {op.get('path')}")
            parent[last] = value
    else:
        raise UnsupportedPatch(f"JSON patch operation {kind!r} is not emulated")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 add/remove/replace/test."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = deep_copy(target)
    for op in operations:
        if not isinstance(op, Mapping):
            raise PatchError("every JSON patch operation must be an object")
        try:
            doc = _apply_op(doc, op)
        except (IndexError, ValueError, KeyError, TypeError) as exc:
            raise PatchError(f"JSON patch {op!r} cannot be applied: {exc}") from exc
    return doc

"""The `scale` subresource (autoscaling/v1 Scale) for the strict fake apiserver, as a real apiserver serves it.

GET returns the Scale of a Deployment, StatefulSet or ReplicaSet; PATCH (merge, strategic or JSON patch)
and PUT change only `spec.replicas` of the parent, guarded by its resourceVersion (409 when stale), and
refuse a negative or non-integer count (422) or a renamed object (400). Any other subresource or kind
stays a 404, so the controller cannot lean on something a real cluster would not serve.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import kmock
from kmock._internal.rendering import Request

from tests.fakekube.patching import PatchError, UnsupportedPatch
from tests.fakekube.server import Call, FakeKube, _error, bad_request, conflict, invalid, not_found
from tests.fakekube.store import RESOURCES, ResourceType

__all__ = ["ScalingFakeKube", "scale_of"]

SCALABLE = ("deployments", "statefulsets", "replicasets")


def _selector(obj: Mapping[str, Any]) -> str:
    labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def scale_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 1))},
        "status": {"replicas": int((obj.get("status") or {}).get("replicas") or 0), "selector": _selector(obj)},
    }


class ScalingFakeKube(FakeKube):
    """FakeKube plus `deployments/scale`, `statefulsets/scale` and `replicasets/scale`."""

    def _declare_resources(self) -> None:
        super()._declare_resources()
        for rt in RESOURCES.values():
            if rt.plural in SCALABLE:
                info = self.emulator.resources[rt.ref]
                self.emulator.resources[rt.ref] = kmock.ResourceInfo(
                    kind=info.kind,
                    singular=info.singular,
                    namespaced=info.namespaced,
                    subresources={*info.subresources, "scale"},
                    verbs=info.verbs,
                )

    def _dispatch_named(
        self, rt: ResourceType, namespace: str | None, name: str, request: Request, call: Call
    ) -> tuple[int, Any]:
        if call.subresource != "scale":
            return super()._dispatch_named(rt, namespace, name, request, call)
        if rt.plural not in SCALABLE:
            raise _error(404, "NotFound", "the server could not find the requested resource (scale)")
        current = self.store.get(rt, namespace, name)
        if current is None:
            raise not_found(rt, name)
        call.uid = current["metadata"]["uid"]
        dry_run = request.params.get("dryRun") == "All"
        scale = scale_of(current)
        if call.verb == "get":
            return 200, scale
        if call.verb == "patch":
            try:
                new = self._apply_patch(call.content_type, copy.deepcopy(scale), request.data)
            except PatchError as exc:
                raise _error(422, "Invalid", str(exc)) from exc
            except UnsupportedPatch as exc:
                raise _error(501, "NotImplemented", f"tests.fakekube: {exc}") from exc
            return 200, self._write_scale(rt, current, new, dry_run=dry_run)
        if call.verb == "update":
            body = request.data
            if not isinstance(body, Mapping):
                raise bad_request("the body of the request must be a JSON object")
            if not (body.get("metadata") or {}).get("resourceVersion"):
                raise invalid(rt, name, [("metadata.resourceVersion", "must be specified for an update")])
            return 200, self._write_scale(rt, current, copy.deepcopy(dict(body)), dry_run=dry_run)
        raise _error(405, "MethodNotAllowed", f"{call.method} on scale is not emulated")

    def _write_scale(self, rt: ResourceType, current: dict[str, Any], new: Any, *, dry_run: bool) -> dict[str, Any]:
        name = current["metadata"]["name"]
        if not isinstance(new, dict):
            raise bad_request("the patch must produce a JSON object")
        meta = new.get("metadata") or {}
        if meta.get("name") not in (None, name) or meta.get("namespace") not in (
            None,
            current["metadata"].get("namespace"),
        ):
            raise bad_request("the name or namespace of the Scale does not match the object")
        rv = meta.get("resourceVersion")
        if rv is not None and rv != current["metadata"]["resourceVersion"]:
            raise conflict(
                rt, name, "the object has been modified; please apply your changes to the latest version and try again"
            )
        replicas = (new.get("spec") or {}).get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise invalid(rt, name, [("spec.replicas", f"Invalid value: {replicas!r}: must be a non-negative integer")])
        parent = copy.deepcopy(current)
        parent.setdefault("spec", {})["replicas"] = replicas
        stored = self._finish_write(rt, current, parent, status_only=False, dry_run=dry_run)
        return scale_of(stored)

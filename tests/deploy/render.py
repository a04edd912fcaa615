"""A small kustomize build for the features deploy/ uses, so tests need no kustomize binary.

Supported: resources and bases (files and kustomization directories), namespace, images, patches and
patchesStrategicMerge (strategic merge, by path, targeted by the patch's own kind and name) and
configMapGenerator (files, literals, labels and disableNameSuffixHash: true, per generator or in
generatorOptions). tests/deploy/test_kustomize.py checks that it prints what `kubectl kustomize` prints.
Any other kustomization field is an error, so a kustomization that outgrows this renderer fails loudly
instead of rendering wrong.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = {
    "apiVersion",
    "kind",
    "namespace",
    "bases",
    "resources",
    "images",
    "patches",
    "patchesStrategicMerge",
    "configMapGenerator",
    "generatorOptions",
}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "PriorityClass",
    "RuntimeClass",
    "StorageClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}
# Strategic-merge keys of the lists deploy/ patches (k8s.io/api patchMergeKey); other lists are replaced.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}
POD_TEMPLATE_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job", "ReplicaSet"}


class RenderError(Exception):
    pass


def _kustomization_file(directory: Path) -> Path:
    for name in KUSTOMIZATION_NAMES:
        if (directory / name).is_file():
            return directory / name
    raise RenderError(f"{directory}: no kustomization file")


def _load_docs(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def strategic_merge(base: Any, patch: Any, key: str | None = None) -> Any:
    """Merge `patch` into `base` the way kubectl/kustomize do for the fields listed in MERGE_KEYS."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for name, value in patch.items():
            if value is None:
                merged.pop(name, None)
            elif name in merged:
                merged[name] = strategic_merge(merged[name], value, name)
            else:
                merged[name] = copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        merge_key = MERGE_KEYS[key]
        merged_list = [copy.deepcopy(item) for item in base]
        for item in patch:
            found = next(
                (i for i, old in enumerate(merged_list) if old.get(merge_key) == item.get(merge_key)), None
            )
            if found is None:
                merged_list.append(copy.deepcopy(item))
            else:
                merged_list[found] = strategic_merge(merged_list[found], item)
        return merged_list
    return copy.deepcopy(patch)


def _group(api_version: str) -> str:
    return api_version.split("/")[0] if "/" in api_version else ""


def _apply_patch(objects: list[Obj], patch: Obj, source: Path) -> None:
    targets = [
        i
        for i, obj in enumerate(objects)
        if obj["kind"] == patch["kind"]
        and _group(obj["apiVersion"]) == _group(patch["apiVersion"])
        and obj["metadata"]["name"] == patch["metadata"]["name"]
    ]
    if len(targets) != 1:
        raise RenderError(
            f"{source}: patch for {patch['kind']}/{patch['metadata']['name']} matches {len(targets)} objects"
        )
    objects[targets[0]] = strategic_merge(objects[targets[0]], patch)


def _pod_specs(obj: Obj) -> list[Obj]:
    if obj["kind"] in POD_TEMPLATE_KINDS:
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] == "Pod":
        return [obj["spec"]]
    return []


def _image_name(reference: str) -> str:
    """`registry:5000/repo/name:tag@sha256:...` -> `registry:5000/repo/name`."""
    name = reference.split("@")[0]
    head, _, last = name.rpartition("/")
    last = last.split(":")[0]
    return f"{head}/{last}" if head else last


def _set_images(objects: list[Obj], images: list[Obj]) -> None:
    for obj in objects:
        for spec in _pod_specs(obj):
            for container in spec.get("initContainers", []) + spec.get("containers", []):
                name = _image_name(container["image"])
                for image in images:
                    if image["name"] == name:
                        new = image.get("newName", name)
                        if "digest" in image:
                            container["image"] = f"{new}@{image['digest']}"
                        else:
                            container["image"] = f"{new}:{image['newTag']}" if "newTag" in image else new


def _set_namespace(objects: list[Obj], namespace: str) -> None:
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = namespace
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            for subject in obj.get("subjects", []):
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = namespace


def _config_maps(directory: Path, generators: list[Obj], defaults: Obj) -> list[Obj]:
    made = []
    for gen in generators:
        options = {**defaults, **gen.get("options", {})}
        if not options.get("disableNameSuffixHash"):
            raise RenderError(
                f"{directory}: configMapGenerator {gen['name']}: name hashing is not supported here"
            )
        data: dict[str, str] = {}
        for entry in gen.get("files", []):
            key, _, rel = entry.partition("=") if "=" in entry else (Path(entry).name, "", entry)
            data[key] = (directory / rel).read_text()
        for literal in gen.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        metadata: Obj = {"name": gen["name"]}
        if options.get("labels"):
            metadata["labels"] = dict(options["labels"])
        made.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
    return made


def build(directory: Path) -> list[Obj]:
    """The objects `kustomize build directory` would print, in resource order."""
    directory = directory.resolve()
    path = _kustomization_file(directory)
    spec = yaml.safe_load(path.read_text()) or {}
    unknown = set(spec) - SUPPORTED_FIELDS
    if unknown:
        raise RenderError(f"{path}: fields this renderer does not implement: {sorted(unknown)}")
    objects: list[Obj] = []
    for entry in [*spec.get("bases", []), *spec.get("resources", [])]:
        target = (directory / entry).resolve()
        objects.extend(build(target) if target.is_dir() else _load_docs(target))
    objects.extend(_config_maps(directory, spec.get("configMapGenerator", []), spec.get("generatorOptions", {})))
    patch_entries = [*spec.get("patches", []), *({"path": p} for p in spec.get("patchesStrategicMerge", []))]
    for patch_entry in patch_entries:
        if set(patch_entry) != {"path"}:
            raise RenderError(f"{path}: only `patches: - path: FILE` (strategic merge) is supported")
        patch_file = directory / patch_entry["path"]
        for patch in _load_docs(patch_file):
            _apply_patch(objects, patch, patch_file)
    if spec.get("images"):
        _set_images(objects, spec["images"])
    if spec.get("namespace"):
        _set_namespace(objects, spec["namespace"])
    seen: set[tuple[str, str, str | None]] = set()
    for obj in objects:
        ident = (obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
        if ident in seen:
            raise RenderError(f"{path}: {ident} defined twice")
        seen.add(ident)
    return objects

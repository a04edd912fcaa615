"""The overlays as `kubectl kustomize` renders them: the image users build and push, RBAC and NetworkPolicies.

The other deploy tests read the same rendering (tests/deploy/helpers.rendered); these check what is
specific to the install path: the image follows an overlay's `images:` entry as docs/deploy.md tells users to
set it, every kubectl from Debian's kubernetes-client up renders the overlays, and the small renderer in
tests/deploy/render.py prints exactly what kubectl prints.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediator import __version__
from tests.deploy.helpers import DEPLOY, MONITORING, OVERLAYS, ROOT, rendered, require_binary
from tests.deploy.render import build

DIRECTORIES = {**OVERLAYS, "monitoring": MONITORING}
DOCS = (ROOT / "docs" / "deploy.md").read_text()


def _unordered(value: Any) -> Any:
    """Lists as sets: kustomize puts the items a patch adds first, the small renderer last (same objects)."""
    if isinstance(value, dict):
        return {key: _unordered(item) for key, item in value.items()}
    if isinstance(value, list):
        return sorted((_unordered(item) for item in value), key=lambda item: yaml.safe_dump(item, sort_keys=True))
    return value


def _canonical(objects: Any) -> list[str]:
    return sorted(yaml.safe_dump(_unordered(obj), sort_keys=True) for obj in objects)


def _kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = require_binary("kubectl", "kubernetes-client")
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


def _images(objects: Any) -> dict[str, str]:
    found = {}
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            spec = obj["spec"]["template"]["spec"]
            for container in spec.get("initContainers", []) + spec["containers"]:
                found[f"{obj['kind']}/{obj['metadata']['name']}/{container['name']}"] = container["image"]
    return found


@pytest.mark.parametrize("name", sorted(DIRECTORIES))
def test_the_test_renderer_prints_what_kubectl_prints(name: str) -> None:
    assert _canonical(build(DIRECTORIES[name])) == _canonical(rendered(DIRECTORIES[name]))


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_container_runs_the_image_built_from_the_dockerfile(overlay: str) -> None:
    images = _images(rendered(OVERLAYS[overlay]))
    assert len(images) >= 3  # the controller, its db-upgrade init container, the sidecar
    assert set(images.values()) == {f"gpu-remediator:{__version__}"}, images


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_setting_the_overlays_image_as_the_docs_say_moves_every_container(overlay: str, tmp_path: Path) -> None:
    """docs/deploy.md: push the image, then set `newName` (and `newTag`) in the overlay's `images:` entry."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    kustomization = copy / "overlays" / overlay / "kustomization.yaml"
    spec = yaml.safe_load(kustomization.read_text())
    (entry,) = [image for image in spec["images"] if image["name"] == "gpu-remediator"]
    entry["newName"] = "registry.example.com/team/gpu-remediator"
    entry["newTag"] = "0.2.0"
    kustomization.write_text(yaml.safe_dump(spec, sort_keys=False))

    images = _images(_kustomize(copy / "overlays" / overlay))
    assert set(images.values()) == {"registry.example.com/team/gpu-remediator:0.2.0"}, images


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_rbac_and_network_policies_are_in_what_kubectl_applies(overlay: str) -> None:
    objects = rendered(OVERLAYS[overlay])
    kinds = {(obj["kind"], obj["metadata"]["name"]) for obj in objects}
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"):
        assert any(k == kind for k, _ in kinds), f"no {kind} in kubectl kustomize {overlay}"
    policies = [obj for obj in objects if obj["kind"] == "NetworkPolicy"]
    selected = {tuple(sorted(p["spec"]["podSelector"]["matchLabels"].items())) for p in policies}
    assert (("app.kubernetes.io/component", "controller"), ("app.kubernetes.io/name", "gpu-remediator")) in selected
    assert (("app.kubernetes.io/component", "sidecar"), ("app.kubernetes.io/name", "gpu-remediator")) in selected
    for policy in policies:
        assert policy["spec"]["policyTypes"] == ["Ingress"] or "Ingress" in policy["spec"]["policyTypes"]
        assert all(rule.get("from") for rule in policy["spec"].get("ingress", [])), "an ingress rule open to all"


def test_docs_say_how_to_build_push_and_set_the_image() -> None:
    assert "ghcr.io/gpu-remediator" not in DOCS, "docs name an image that is not published"
    assert f"docker build -t gpu-remediator:{__version__} ." in DOCS
    assert "docker push" in DOCS
    assert "images:" in DOCS and "newName:" in DOCS
    for overlay in OVERLAYS.values():
        assert "newName:" in (overlay / "kustomization.yaml").read_text()

"""Shared helpers of the deploy tests: paths, the overlays as `kubectl kustomize` renders them (once), tools."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MONITORING = DEPLOY / "monitoring"
OVERLAYS = {"single": DEPLOY / "overlays" / "single", "ha": DEPLOY / "overlays" / "ha"}
NAMESPACE = "gpu-remediator"
CONTROLLER_LABELS = {"app.kubernetes.io/name": "gpu-remediator", "app.kubernetes.io/component": "controller"}
SIDECAR_LABELS = {"app.kubernetes.io/name": "gpu-remediator", "app.kubernetes.io/component": "sidecar"}


def load_script(path: Path) -> ModuleType:
    """Import one of deploy/'s scripts by path (deploy/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"deploy_script_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def rendered(directory: Path) -> tuple[dict[str, Any], ...]:
    """The objects `kubectl kustomize directory` prints: what `kubectl apply -k` would send."""
    kubectl = require_binary("kubectl", "kubernetes-client")
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kubectl kustomize {directory} failed: {done.stderr}"
    return tuple(obj for obj in yaml.safe_load_all(done.stdout) if obj)


def only(objects: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def require_binary(name: str, package: str) -> str:
    """Path of a tool the deploy checks need; fails (never skips) when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"`{name}` not found on PATH: install the Debian package `{package}` "
            f"(apt-get install -y --no-install-recommends {package})",
            pytrace=False,
        )
    return path

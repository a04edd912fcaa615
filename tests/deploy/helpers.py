"""Shared helpers of the deploy tests: paths, the rendered overlays (rendered once), tool lookup."""

from __future__ import annotations

import importlib.util
import shutil
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.deploy.render import build

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
    return tuple(build(directory))


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

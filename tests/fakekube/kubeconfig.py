"""A kubeconfig file pointing the official client (in a controller subprocess) at the fake API server."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(path: Path, server_url: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": server_url}}],
        "users": [{"name": "fake", "user": {"token": "fake-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "current-context": "fake",
    }
    path.write_text(yaml.safe_dump(config))
    return path

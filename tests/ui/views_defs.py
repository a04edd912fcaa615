"""Definitions for the fleet, "why did nothing happen?" and preview tests: the approval test playbooks plus
a hot-GPU rule with a cooldown and a playbook whose second step reads the first step's output."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.approvals.harness import DEFS

HOT_RULE = """\
rules:
  - name: hot-gpu
    match:
      - alertname="GPUTemperatureHigh"
    playbook: gated-drain
    kind: thermal
    priority: 50
    cooldown: 1h
  - name: needs-output
    match:
      - alertname="GPUDeferredParams"
    playbook: scale-then-use
    priority: 50
"""

DEFERRED_PLAYBOOK = """\
name: scale-then-use
description: The second step's parameter is the first step's output.
target: node
steps:
  - name: scale
    action: label
    approval: required
    params:
      key: remediator.io/state
      value: scaled
  - name: use
    action: label
    params:
      key: remediator.io/previous
      value: "{{ steps.scale.output.value }}"
"""


def views_defs(tmp_path: Path) -> dict[str, Path]:
    """Copy the approval test definitions under tmp_path and add the rules above; settings overrides."""
    root = tmp_path / "defs"
    shutil.copytree(DEFS, root)
    (root / "rules" / "views.yaml").write_text(HOT_RULE)
    (root / "playbooks" / "scale-then-use.yaml").write_text(DEFERRED_PLAYBOOK)
    return {"rules_dir": root / "rules", "playbooks_dir": root / "playbooks"}


def hot_labels(node: str = "gpu-node-7", gpu: str = "3") -> dict[str, str]:
    return {"alertname": "GPUTemperatureHigh", "Hostname": node, "gpu": gpu, "severity": "critical",
            "UUID": f"GPU-8e6a1c2d-0000-4000-8000-00000000000{gpu}", "modelName": "NVIDIA H200"}

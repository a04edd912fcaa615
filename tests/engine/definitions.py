"""Small rule and playbook sets written to a temporary directory, for engine tests that need their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers import am_alert

NOTE_RULE = """rules:
  - name: note
    match: ['alertname="GPUNote"']
    playbook: note-node
    priority: 100
"""

# Three steps with their actions' own undo (no `revert:`): untaint, uncordon, unannotate. The annotation's
# value is alert text.
NOTE_PLAYBOOK = """name: note-node
target: node
on_resolved: revert
steps:
  - name: taint
    action: taint
    params: {key: example.com/noted, value: "yes", effect: NoSchedule}
  - name: cordon
    action: cordon
  - name: note
    action: annotate
    params:
      key: example.com/note
      value: "{{ alert.annotations.summary }}"
"""

GATED_RULE = """rules:
  - name: note
    match: ['alertname="GPUNote"']
    playbook: gated-node
    priority: 100
"""

# A taint, then a cordon a person must approve; both undone by their actions' own undo.
GATED_PLAYBOOK = """name: gated-node
target: node
steps:
  - name: taint
    action: taint
    params: {key: remediator.io/gpu-unhealthy, value: "noted", effect: NoSchedule}
  - name: cordon
    action: cordon
    approval: required
"""


def definitions(tmp_path: Path, rules: str, *playbooks: str) -> dict[str, Path]:
    """Write a rules file and playbook files; returns the settings that point the controller at them."""
    rules_dir = tmp_path / "rules"
    playbooks_dir = tmp_path / "playbooks"
    rules_dir.mkdir()
    playbooks_dir.mkdir()
    (rules_dir / "rules.yaml").write_text(rules)
    for i, text in enumerate(playbooks):
        (playbooks_dir / f"playbook-{i}.yaml").write_text(text)
    return {"rules_dir": rules_dir, "playbooks_dir": playbooks_dir}


def note_alert(node: str, summary: str, *, status: str = "firing") -> dict[str, Any]:
    return am_alert({"alertname": "GPUNote", "Hostname": node}, status=status, annotations={"summary": summary})

"""docs/playbooks.md carries a reference generated from the models; it must match the code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_generated_reference_is_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_playbook_reference.py"), "--check"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr


def test_the_reference_names_every_field_and_action() -> None:
    from remediator.actions.registry import default_registry
    from remediator.definitions import Playbook, Rule, Step

    doc = (ROOT / "docs" / "playbooks.md").read_text()
    for model in (Rule, Playbook, Step):
        for name in model.model_fields:
            assert f"| `{name}` |" in doc, f"{model.__name__}.{name}"
    for action in default_registry():
        assert f"#### `{action}`" in doc

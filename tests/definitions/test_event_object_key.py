"""The event action's target key is `object:`; the old `on:` (a boolean to YAML 1.1 tools) still works, with a
warning from `remediator check` and in the log, and nothing shipped spells it the old way."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from remediator.actions.kube_event import RecordKubeEvent
from remediator.actions.registry import default_registry
from remediator.definitions import load_definitions
from remediator.engine.bootstrap import action_params
from remediator.settings import BUNDLED_DIR

ROOT = Path(__file__).resolve().parents[2]


def _boolean_keys(node: Any, path: str = "") -> list[str]:
    """Keys a YAML 1.1 loader (PyYAML's SafeLoader, as Helm and kubectl read YAML) turned into booleans."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, bool):
                found.append(f"{path}.{key}")
            found.extend(_boolean_keys(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_boolean_keys(value, f"{path}[{index}]"))
    return found


def _shipped_yaml() -> list[tuple[str, str]]:
    files = sorted((BUNDLED_DIR / "playbooks").glob("*.yaml")) + sorted((BUNDLED_DIR / "tests").glob("*.yaml"))
    texts = [(str(f), f.read_text()) for f in files]
    for name in ("definitions-playbooks.yaml", "definitions-rules.yaml"):
        config_map = yaml.safe_load((ROOT / "deploy" / "base" / name).read_text())
        texts.extend((f"{name}:{key}", text) for key, text in config_map["data"].items())
    return texts


def test_nothing_shipped_has_a_key_yaml_1_1_reads_as_a_boolean() -> None:
    texts = _shipped_yaml()
    assert any("object: pods" in text for _, text in texts)
    problems = {name: keys for name, text in texts if (keys := _boolean_keys(yaml.safe_load(text)))}
    assert problems == {}


def test_the_old_key_still_parses_and_a_conflict_is_refused() -> None:
    assert RecordKubeEvent().parse({"reason": "R", "message": "m", "on": "pods"}).object == "pods"
    assert RecordKubeEvent().parse({"reason": "R", "message": "m", "object": "pods"}).object == "pods"
    assert RecordKubeEvent().parse({"reason": "R", "message": "m"}).object == "node"
    with pytest.raises(ValueError, match="deprecated"):
        RecordKubeEvent().parse({"reason": "R", "message": "m", "on": "pods", "object": "node"})


def _old_spelling(tmp_path: Path) -> tuple[Path, Path, Path, int]:
    rules, playbooks = tmp_path / "rules", tmp_path / "playbooks"
    shutil.copytree(BUNDLED_DIR / "rules", rules)
    shutil.copytree(BUNDLED_DIR / "playbooks", playbooks)
    book = playbooks / "notify-pods.yaml"
    lines = book.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip() == "object: pods")
    lines[index] = lines[index].replace("object: pods", "on: pods")
    book.write_text("\n".join(lines) + "\n")
    return rules, playbooks, book, index + 1


def test_check_warns_about_the_old_key_at_its_line_and_passes(tmp_path: Path) -> None:
    rules, playbooks, book, line = _old_spelling(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "remediator.cli", "check", str(rules), str(playbooks)],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [warning] = [w for w in result.stdout.splitlines() if ": warning: " in w]
    assert warning.startswith(f"{book}:{line}: warning: parameter 'on' of action 'event' is deprecated: write 'object'")
    assert "ok:" in result.stdout


def test_loading_the_old_key_logs_a_warning_and_keeps_the_meaning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rules, playbooks, book, line = _old_spelling(tmp_path)
    with caplog.at_level(logging.WARNING, logger="remediator.definitions"):
        defs = load_definitions(rules, playbooks, action_params(default_registry()))
    [record] = [r for r in caplog.records if "deprecated" in r.getMessage()]
    assert f"{book}:{line}: warning: parameter 'on'" in record.getMessage()
    [step] = [s for s in defs.playbooks["notify-pods"].steps if s.action == "event"]
    assert RecordKubeEvent().parse({**step.params, "reason": "R", "message": "m"}).object == "pods"

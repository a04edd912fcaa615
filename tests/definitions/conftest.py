"""Fixtures for definition tests: fake action parameter models and a writer for rule/playbook trees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from textwrap import dedent

import pytest
from pydantic import BaseModel

from tests.definitions.fake_actions import KNOWN_ACTIONS


@pytest.fixture
def known_actions() -> dict[str, type[BaseModel]]:
    return dict(KNOWN_ACTIONS)


@pytest.fixture
def tree(tmp_path: Path) -> Callable[[dict[str, str]], tuple[Path, Path]]:
    """Write {"rules/a.yaml": text, "playbooks/b.yaml": text} under tmp_path; return (rules, playbooks)."""

    def write(files: dict[str, str]) -> tuple[Path, Path]:
        (tmp_path / "rules").mkdir(exist_ok=True)
        (tmp_path / "playbooks").mkdir(exist_ok=True)
        for name, text in files.items():
            (tmp_path / name).write_text(dedent(text).lstrip("\n"))
        return tmp_path / "rules", tmp_path / "playbooks"

    return write

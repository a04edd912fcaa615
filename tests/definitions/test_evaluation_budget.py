"""Hostile definitions are refused, not run: YAML alias bombs, oversized files, and templates or conditions
that would loop or allocate without end fail with a clear error instead of pinning the event loop."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remediator.definitions.conditions import compile_condition
from remediator.definitions.loader import check_paths, load_definitions
from remediator.definitions.templates import render_value
from remediator.errors import ConditionError, DefinitionSetError
from tests.definitions.fake_actions import KNOWN_ACTIONS as KNOWN

# Nine levels of nine aliases: 9**9 (387 million) nodes for anything that walks the data.
BOMB_237 = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
    "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
)
BOMB_272 = BOMB_237 + "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"


def test_the_bombs_are_the_sizes_reported() -> None:
    assert (len(BOMB_237.encode()), len(BOMB_272.encode())) == (237, 272)


@pytest.mark.parametrize("text", [BOMB_237, BOMB_272], ids=["237-bytes", "272-bytes"])
def test_an_alias_bomb_is_refused_with_file_and_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    errors = check_paths([path], KNOWN)
    assert len(errors) == 1
    rendered = errors[0].render()
    assert rendered.startswith(f"{path}:")
    assert "alias" in rendered and "nodes" in rendered
    assert 1 <= errors[0].line <= text.count("\n")


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("steps: &s\n  - name: x\n    sub: *s\n")
    errors = check_paths([path], KNOWN)
    assert errors and "recursive alias" in errors[0].message


def test_an_alias_bomb_in_a_playbook_directory_refuses_the_load(tmp_path: Path) -> None:
    rules, playbooks = tmp_path / "rules", tmp_path / "playbooks"
    rules.mkdir()
    playbooks.mkdir()
    (playbooks / "bomb.yaml").write_text("name: bomb\n" + BOMB_272)
    with pytest.raises(DefinitionSetError) as caught:
        load_definitions(rules, playbooks, KNOWN)
    assert any(e.file.endswith("bomb.yaml") and "alias" in e.message for e in caught.value.errors)


def test_remediator_check_reports_the_bomb_as_file_line_message(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB_272)
    result = subprocess.run(
        [sys.executable, "-m", "remediator.cli", "check", str(path)], capture_output=True, text=True, timeout=60,
        env=dict(os.environ),
    )
    assert result.returncode != 0
    line = next(ln for ln in (result.stdout + result.stderr).splitlines() if ln.startswith(str(path)))
    _file, number, message = line.split(":", 2)
    assert number.isdigit() and "alias" in message


def test_a_file_over_the_size_cap_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: big\nsteps: []\n# " + "x" * 4096 + "\n")
    errors = check_paths([path], KNOWN, max_file_bytes=2048)
    assert len(errors) == 1 and "larger than the 2048 allowed" in errors[0].message


@pytest.mark.parametrize(
    "template",
    [
        "{% for i in range(2000) %}{% for j in range(2000) %}{% endfor %}{% endfor %}",
        "{% for i in range(100000) %}{% endfor %}",
        "{{ 'x' * 100000000 }}",
        "n={{ 9 ** 9999999 }}",
        "{{ 'x'.ljust(100000000) }}",
        "{{ 'x' | center(100000000) }}",
        "w={{ '%0100000000d' % 1 }}",
    ],
)
def test_a_template_past_its_budget_is_refused(template: str) -> None:
    with pytest.raises(ValueError, match=r"template|range|longer"):
        render_value(template, {"params": {}})


def test_templates_within_the_budget_still_render() -> None:
    out = render_value("{% for i in range(3) %}{{ i }}{% endfor %}-{{ params.n * 2 }}", {"params": {"n": 21}})
    assert out == "012-42"


def test_a_condition_past_its_budget_is_refused() -> None:
    pods = [{"name": f"p{i}"} for i in range(400)]
    condition = compile_condition("context.pods.all(a, context.pods.all(b, a.name != b.name || true))")
    with pytest.raises(ConditionError, match="refused"):
        condition.evaluate({"context": {"pods": pods}})


def test_conditions_within_the_budget_still_evaluate() -> None:
    pods = [{"name": f"p{i}"} for i in range(400)]
    assert compile_condition('context.pods.exists(p, p.name == "p399")').evaluate({"context": {"pods": pods}})


def test_a_catastrophic_regex_in_matches_runs_in_linear_time() -> None:
    """`matches()` runs on RE2: `(a+)+$` against 100,000 a's and a b would backtrack for ages on Python's
    `re` (and the test would hit its timeout); here it simply does not match."""
    hostile = {"alert": {"summary": "a" * 100_000 + "b"}}
    assert compile_condition('alert.summary.matches("(a+)+$")').evaluate(hostile) is False
    assert compile_condition('alert.summary.matches("^(a+)+b$")').evaluate(hostile) is True


def test_a_backreference_fails_the_condition_with_its_reason() -> None:
    condition = compile_condition(r'alert.summary.matches("(a)\\1")')
    with pytest.raises(ConditionError, match="failed"):
        condition.evaluate({"alert": {"summary": "aa"}})

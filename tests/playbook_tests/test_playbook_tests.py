"""`remediator test`: the shipped playbook tests pass, cover every shipped playbook, and a wrong expectation
fails with a readable diff."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from remediator.actions.registry import default_registry
from remediator.engine.bootstrap import load_defs
from remediator.settings import BUNDLED_DIR, Settings
from remediator.tools.playbook_tests import BUNDLED_TESTS, load_tests, run_tests
from tests.cli.test_cli import run
from tests.reload.conftest import remove_step

CASES = Path(__file__).resolve().parent / "cases"
DEFS = Path(__file__).resolve().parents[1] / "replay" / "defs"


def test_the_shipped_tests_pass() -> None:
    result = run("test", "-v")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 failed" in result.stdout
    assert "PASS" in result.stdout and "FAIL" not in result.stdout


def test_every_shipped_playbook_has_tests() -> None:
    settings = Settings()
    actions = default_registry()
    report = run_tests([BUNDLED_TESTS], load_defs(settings, actions), settings, actions)
    assert report.ok, [r.differences for r in report.results if not r.ok]
    assert report.uncovered == [], f"add tests for {report.uncovered} under {BUNDLED_TESTS}"
    assert run("test", "--require-coverage").returncode == 0


def test_the_loader_and_the_configmap_renderer_do_not_take_tests_for_definitions() -> None:
    settings = Settings()
    defs = load_defs(settings, default_registry())
    assert not any(name.startswith("tests/") or "/tests/" in name for name in defs.sources)
    assert not (BUNDLED_DIR / "playbooks" / "tests").exists()


def fixed(*args: str) -> list[str]:
    """Arguments that run against the fixed definitions of tests/replay/defs."""
    return [*args, "--rules", str(DEFS / "rules"), "--playbooks", str(DEFS / "playbooks")]


def test_the_fixed_case_passes() -> None:
    result = run("test", *fixed(str(CASES), "-v"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 0 failed" in result.stdout
    assert "playbooks without tests: record" in result.stdout
    assert run("test", *fixed(str(CASES), "--require-coverage")).returncode == 1


def test_a_wrong_expectation_fails_with_a_readable_diff(tmp_path: Path) -> None:
    case = tmp_path / "quarantine.yaml"
    case.write_text((CASES / "quarantine.yaml").read_text().replace("value: xid-79,", "value: xid-97,", 1))
    result = run("test", *fixed(str(case)))
    assert result.returncode == 1
    out = result.stdout
    assert f"FAIL  {case}:4: a fatal Xid taints" in out
    assert "steps[0] taint: params.value: expected 'xid-97', got 'xid-79'" in out
    assert "--- expected" in out and "+++ actual" in out
    assert "-    value: xid-97" in out and "+    value: xid-79" in out
    assert "0 passed, 1 failed" in out


def test_a_wrong_action_or_approval_is_named_in_the_diff(tmp_path: Path) -> None:
    case = tmp_path / "quarantine.yaml"
    text = (CASES / "quarantine.yaml").read_text()
    text = text.replace("action: taint\n", "action: cordon\n          approval: true\n", 1)
    case.write_text(text)
    result = run("test", *fixed(str(case)))
    assert result.returncode == 1
    assert "steps[0] taint: action: expected 'cordon', got 'taint'" in result.stdout
    assert "steps[0] taint: approval: expected True, got False" in result.stdout


def test_a_removed_step_fails_the_test(tmp_path: Path) -> None:
    shutil.copytree(DEFS, tmp_path / "defs")
    remove_step(tmp_path / "defs" / "playbooks" / "quarantine.yaml", "drain")
    result = run("test", str(CASES), "--rules", str(tmp_path / "defs" / "rules"), "--playbooks",
                 str(tmp_path / "defs" / "playbooks"), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    [failed] = [r for r in report["results"] if not r["ok"]]
    assert "steps that run: expected ['taint', 'cordon', 'drain', 'event'], got ['taint', 'cordon', 'event']" in (
        failed["differences"]
    )


def test_guardrail_rule_and_skip_mismatches_are_reported(tmp_path: Path) -> None:
    case = tmp_path / "case.yaml"
    case.write_text(
        """
tests:
  - name: expects the wrong verdict and the wrong rule
    alert:
      labels: {alertname: GPUXidError, Hostname: gpu-1, xid: "79"}
    fleet: {quarantined_nodes: [a], max_quarantined_nodes: "1"}
    expect:
      rule: thermal
      guardrails: allow
      skipped: [drain]
"""
    )
    settings = Settings(rules_dir=DEFS / "rules", playbooks_dir=DEFS / "playbooks")
    actions = default_registry()
    report = run_tests([case], load_defs(settings, actions), settings, actions)
    [result] = report.results
    assert "rule: expected 'thermal', got 'xid-fatal'" in result.differences
    assert any(d.startswith("guardrails: expected allow, got hold (circuit breaker") for d in result.differences)
    assert "skipped: expected ['drain'], got []" in result.differences


def test_a_cluster_snapshot_feeds_the_context_and_the_guardrails(tmp_path: Path) -> None:
    case = tmp_path / "case.yaml"
    case.write_text(
        """
tests:
  - name: an opted-out node, found through its InternalIP
    alert:
      labels: {alertname: GPUXidError, instance: "10.0.0.7:9400", xid: "79"}
    cluster:
      nodes:
        - metadata: {name: gpu-7, labels: {remediator.io/exclude: "true"}}
          status: {addresses: [{type: InternalIP, address: 10.0.0.7}]}
    expect:
      target: node:gpu-7
      guardrails: {allow: false, guardrail: opt_out}
"""
    )
    settings = Settings(rules_dir=DEFS / "rules", playbooks_dir=DEFS / "playbooks")
    actions = default_registry()
    report = run_tests([case], load_defs(settings, actions), settings, actions)
    assert report.ok, [r.differences for r in report.results]


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("tests:\n  - name: x\n    alert: {labels: {a: b}}\n    expect: {rule: r, colour: red}\n", 4, "colour"),
        ("tests:\n  - name: x\n    expect: {}\n", 2, "exactly one of `alert` or `payload`"),
        ("rules: []\n", 1, "not a playbook test file"),
        ("tests: [\n", 2, "YAML syntax error"),
    ],
)
def test_broken_test_files_are_reported_with_file_and_line(
    tmp_path: Path, body: str, line: int, message: str
) -> None:
    case = tmp_path / "broken.yaml"
    case.write_text(body)
    tests, errors = load_tests([case])
    assert not tests
    assert any(e.file == str(case) and e.line == line and message in e.render() for e in errors), [
        e.render() for e in errors
    ]
    result = run("test", str(case))
    assert result.returncode == 1 and f"ERROR {case}:{line}:" in result.stdout

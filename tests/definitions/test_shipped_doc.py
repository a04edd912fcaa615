"""docs/playbooks-shipped.md's "Alert -> rule -> playbook" table is written by hand; this holds it to the shipped
rules: every bundled rule has exactly one row, naming the alert the rule matches and the playbook it runs; the table
names no rule that does not exist; and every GPU alert of the shipped PrometheusRule has a row (with rule `none`
where nothing is shipped for it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from remediator.actions.registry import default_registry
from remediator.definitions import load_definitions
from remediator.definitions.loader import BUNDLED_PLAYBOOKS, BUNDLED_RULES

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "playbooks-shipped.md"
PROMETHEUS_RULE = ROOT / "deploy" / "monitoring" / "prometheus-rules.yaml"
HEADER = "| alert | rule | playbook | when the alert resolves |"
_TICKED = re.compile(r"`([^`]+)`")
_ALERTNAME = re.compile(r'^alertname="([^"]+)"$')


def table_rows(text: str) -> list[tuple[str, str, str]]:
    """(alert, rule, playbook) of each row: the alert and the playbook are the first backticked word of their
    column, the rule its backticked name or `none`."""
    lines = text.splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"{DOC.name}: a row with {len(cells)} cells: {line}"
        alert, rule, playbook = (_TICKED.search(c) for c in cells[:3])
        assert alert is not None, f"{DOC.name}: no alert in {line}"
        if cells[1] == "none":
            assert cells[2] == "-", f"{DOC.name}: rule none with a playbook: {line}"
            rows.append((alert.group(1), "none", "-"))
            continue
        assert rule is not None and playbook is not None, f"{DOC.name}: rule or playbook missing in {line}"
        rows.append((alert.group(1), rule.group(1), playbook.group(1)))
    return rows


def shipped_rules() -> dict[str, tuple[str, str]]:
    """rule name -> (the alertname it matches, its playbook)."""
    known = {name: a.Params for name, a in default_registry().items()}
    defs = load_definitions(BUNDLED_RULES, BUNDLED_PLAYBOOKS, known)
    found = {}
    for rule in defs.rules:
        names = [m.group(1) for cond in rule.match if (m := _ALERTNAME.match(str(cond).strip()))]
        assert len(names) == 1, f"rule {rule.name}: one alertname=\"...\" condition expected, got {rule.match}"
        found[rule.name] = (names[0], rule.playbook)
    return found


def gpu_alerts() -> set[str]:
    doc = yaml.safe_load(PROMETHEUS_RULE.read_text())
    return {r["alert"] for g in doc["spec"]["groups"] for r in g["rules"] if r.get("alert", "").startswith("GPU")}


def check(text: str) -> list[str]:
    problems = []
    rows = table_rows(text)
    rules = shipped_rules()
    seen: dict[str, int] = {}
    for alert, rule, playbook in rows:
        if rule == "none":
            continue
        seen[rule] = seen.get(rule, 0) + 1
        if rule not in rules:
            problems.append(f"row names rule {rule}, which is not shipped")
            continue
        want_alert, want_playbook = rules[rule]
        if (alert, playbook) != (want_alert, want_playbook):
            problems.append(f"rule {rule}: row says {alert} -> {playbook}, the rule is {want_alert} -> {want_playbook}")
    problems += [f"rule {r} has {n} rows" for r, n in seen.items() if n > 1]
    problems += [f"rule {r} ({a} -> {p}) has no row" for r, (a, p) in sorted(rules.items()) if r not in seen]
    problems += [f"alert {a} has no row" for a in sorted(gpu_alerts() - {alert for alert, _, _ in rows})]
    return problems


def test_the_table_matches_the_shipped_rules() -> None:
    assert check(DOC.read_text()) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("| `xid-restart-vm` | `reboot-node`", "| `xid-nvlink` | `reboot-node`",
         "row names rule xid-nvlink, which is not shipped"),
        ("| `ecc-uncorrectable` | `reset-gpu`", "| `ecc-uncorrectable` | `quarantine-node`",
         "rule ecc-uncorrectable: row says GPUECCUncorrectableError -> quarantine-node"),
        ("| `GPUNVLinkErrors` | `nvlink-errors` |", "| `GPUPCIeReplayRateHigh` | `nvlink-errors` |",
         "rule nvlink-errors: row says GPUPCIeReplayRateHigh -> observe-node"),
        ("| `GPUMemoryUsageHigh` | none | - | - |\n", "", "alert GPUMemoryUsageHigh has no row"),
    ],
)
def test_the_check_sees_a_stale_table(old: str, new: str, problem: str) -> None:
    text = DOC.read_text()
    assert old in text
    assert any(p.startswith(problem) for p in check(text.replace(old, new, 1))), check(text.replace(old, new, 1))


def test_a_rule_without_a_row_is_found() -> None:
    text = DOC.read_text()
    row = next(line for line in text.splitlines() if "| `power-draw-high` |" in line)
    assert "rule power-draw-high (GPUPowerDrawHigh -> record-event) has no row" in check(text.replace(row + "\n", ""))

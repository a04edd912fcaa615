"""The operator commands' printing: kubectl-style AGE and tables, describe on an escalated remediation, and
text made terminal-safe."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from remediator.cli.output import age, describe_remediation, dump, render, table
from remediator.cli.terminal import printable

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Report:
    node: str
    counts: dict[str, list[str]]
    at: datetime


@pytest.mark.parametrize(("ago", "shown"), [
    (timedelta(seconds=5), "5s"),
    (timedelta(seconds=119), "119s"),
    (timedelta(minutes=3, seconds=20), "3m20s"),
    (timedelta(minutes=5), "5m"),
    (timedelta(minutes=12, seconds=59), "12m"),
    (timedelta(hours=5, minutes=3), "5h3m"),
    (timedelta(hours=20, minutes=59), "20h"),
    (timedelta(days=3, hours=4), "3d4h"),
    (timedelta(days=40, hours=23), "40d"),
    (timedelta(days=365 * 2 + 10), "2y10d"),
    (timedelta(seconds=-30), "0s"),
])
def test_age_reads_like_kubectl(ago: timedelta, shown: str) -> None:
    assert age((NOW - ago).isoformat(), NOW) == shown


def test_age_of_a_naive_timestamp_is_utc_and_garbage_is_unknown() -> None:
    assert age("2026-12-02T11:48:00", NOW) == "12m"
    assert age("yesterday", NOW) == "<unknown>"
    assert age(None, NOW) == "<unknown>"


def test_table_aligns_columns_and_fills_empty_cells() -> None:
    assert table(["A", "LONGER"], [["xyz", ""], ["1", "2"]]).splitlines() == [
        "A     LONGER",
        "xyz   -",
        "1     2",
    ]


def test_long_reasons_are_cut_and_an_empty_list_says_so() -> None:
    row = {"id": "0123456789ab", "state": "failed", "playbook": "p", "target": "node:n",
           "created_at": NOW.isoformat(), "state_reason": "x" * 200}
    line = render("remediations", [row], "", NOW).splitlines()[1]
    assert line.startswith("01234567 ") and line.endswith("x" * 57 + "...")
    assert render("alerts", [], "wide", NOW) == "No alerts found."


def test_describe_shows_escalation_and_revert_steps() -> None:
    rem = {
        "id": "r1", "state": "failed", "state_reason": "step gate failed: Xid 79 again", "playbook": "reset-gpu",
        "created_at": NOW.isoformat(), "alert_labels": {}, "planned_steps": [{"index": 0, "name": "reset",
        "action": "reset_gpu", "approval": None}],
        "steps": [
            {"phase": "forward", "index": 0, "name": "reset", "action": "reset_gpu", "status": "failed",
             "attempts": 3, "error": "GPU busy"},
            {"phase": "revert", "index": 0, "name": "untaint", "action": "untaint", "status": "succeeded",
             "attempts": 1, "error": None},
        ],
        "escalation": {"from": "r0", "rung": 2, "ladder": ["reset-gpu", "reboot-node"]},
    }
    text = describe_remediation(rem, [], [], NOW)
    assert "Alert labels:  <none>" in text and "Events:  <none>" in text
    steps = text.split("Steps:", 1)[1].split("Escalation:", 1)[0].splitlines()
    assert any("reset" in s and "failed" in s and "3" in s and "GPU busy" in s for s in steps)
    assert any(s.split()[:3] == ["revert", "0", "untaint"] for s in steps[1:])
    escalation = text.split("Escalation:", 1)[1]
    assert "from:" in escalation and "r0" in escalation and '["reset-gpu", "reboot-node"]' in escalation


def test_printable_escapes_what_a_terminal_acts_on_and_dump_stays_exact() -> None:
    raw = "a\x1b[2J\x07\r\n\t\x00\x08\x7f\x85\x9b\u061c\u200e\u200f\u2028\u2029\u202a\u202e\u2066\u2069é漢\\"
    assert printable(raw) == (  # a backslash stays as it is
        r"a\x1b[2J\x07\r\n\t\x00\x08\x7f\x85\x9b\u061c\u200e\u200f\u2028\u2029\u202a\u202e\u2066\u2069é漢" + "\\"
    )
    assert printable({"k\x1b": ["v\x9b", 1, None, True, ("\u202e",)]}) == {
        r"k\x1b": [r"v\x9b", 1, None, True, (r"\u202e",)]
    }
    report = Report("n\x1b[2J", {"gpu\u202e": ["\r"]}, NOW)
    assert printable(report) == Report(r"n\x1b[2J", {r"gpu\u202e": [r"\r"]}, NOW)
    data = {"label": raw, "plain": "é漢"}
    for output, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        text = dump(data, output)
        assert load(text) == data
        assert not any(c in text.replace("\n", "") for c in "\x1b\x07\r\t\x00\x08\x7f\x85\x9b\u202e\u2066\u2028")
    assert "é漢" in dump({"plain": "é漢"}, "json") and "é漢" in dump({"plain": "é漢"}, "yaml")

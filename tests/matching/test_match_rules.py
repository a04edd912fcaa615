"""match_rules: enabled rules whose matchers all hold, highest priority first, file order on ties."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from remediator.definitions import Rule
from remediator.matching import match_rules


def rule(
    name: str, match: Any, priority: int = 0, enabled: bool = True, params: dict[str, Any] | None = None
) -> Rule:
    return Rule.model_validate(
        {
            "name": name,
            "match": match,
            "playbook": "p",
            "priority": priority,
            "enabled": enabled,
            "params": params or {},
        }
    )


XID = {"alertname": "GPUXidError", "xid": "79", "Hostname": "node-1"}


def test_all_matchers_must_hold() -> None:
    rules = [
        rule("both", ['alertname="GPUXidError"', 'xid="79"']),
        rule("wrong", ['alertname="GPUXidError"', 'xid="48"']),
    ]
    assert [m.rule.name for m in match_rules(XID, rules)] == ["both"]


def test_priority_then_file_order() -> None:
    rules = [
        rule("low", ['alertname="GPUXidError"'], priority=1),
        rule("high-a", ['alertname="GPUXidError"'], priority=10),
        rule("high-b", ['xid=~"79|48"'], priority=10),
    ]
    assert [m.rule.name for m in match_rules(XID, rules)] == ["high-a", "high-b", "low"]


def test_disabled_rules_never_match() -> None:
    rules = [rule("off", ['alertname="GPUXidError"'], enabled=False), rule("on", ['alertname="GPUXidError"'])]
    assert [m.rule.name for m in match_rules(XID, rules)] == ["on"]


def test_mapping_form_means_equality() -> None:
    r = rule("map", {"alertname": "GPUXidError", "xid": 79})
    assert [str(m) for m in r.match] == ['alertname="GPUXidError"', 'xid="79"']
    assert match_rules(XID, [r])
    assert not match_rules({**XID, "xid": "48"}, [r])


def test_match_carries_rule_params() -> None:
    [m] = match_rules(XID, [rule("r", ['alertname="GPUXidError"'], params={"reason": "ecc-dbe"})])
    assert m.params == {"reason": "ecc-dbe"}
    m.params["reason"] = "changed"
    assert m.rule.params == {"reason": "ecc-dbe"}


def test_no_match_is_empty() -> None:
    assert match_rules({"alertname": "Other"}, [rule("r", ['alertname="GPUXidError"'])]) == []


@given(st.lists(st.integers(min_value=-5, max_value=5), min_size=1, max_size=8))
def test_order_is_stable_by_priority(priorities: list[int]) -> None:
    rules = [rule(f"r{i}", ['alertname="GPUXidError"'], priority=p) for i, p in enumerate(priorities)]
    names = [m.rule.name for m in match_rules(XID, rules)]
    expected = [r.name for r in sorted(rules, key=lambda r: -r.priority)]
    assert names == expected

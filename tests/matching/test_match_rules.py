"""match_rules: enabled rules whose matchers all hold, highest priority first, file order on ties."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from remediator.definitions import Rule
from remediator.matching import RuleIndex, match_rules


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


NAMES = ["GPUXidError", "GPUTemperatureHigh", "GPUIdle", ""]


@st.composite
def rule_sets(draw: st.DrawFn) -> list[Rule]:
    rules = []
    for i in range(draw(st.integers(min_value=0, max_value=8))):
        match = []
        for name in draw(st.lists(st.sampled_from(NAMES), max_size=2)):
            match.append(f'alertname="{name}"')
        if draw(st.booleans()):
            match.append(draw(st.sampled_from(['alertname=~"GPU.*"', 'alertname!="GPUIdle"', 'xid="79"', 'xid!="48"'])))
        if not match:
            match.append('Hostname=~".+"')
        rules.append(rule(f"r{i}", match, priority=draw(st.integers(min_value=0, max_value=2)),
                          enabled=draw(st.booleans())))
    return rules


@given(rules=rule_sets(), name=st.sampled_from([*NAMES, "GPUOther", None]), xid=st.sampled_from(["79", "48"]))
def test_the_index_finds_what_trying_every_rule_finds(rules: list[Rule], name: str | None, xid: str) -> None:
    labels = {"xid": xid, "Hostname": "node-1"}
    if name is not None:
        labels["alertname"] = name
    index = RuleIndex(rules)
    assert index.match(labels) == match_rules(labels, rules)


def test_the_index_over_the_shipped_rules_matches_as_every_rule_would() -> None:
    from remediator.actions.registry import default_registry
    from remediator.engine.bootstrap import load_defs
    from remediator.settings import Settings

    defs = load_defs(Settings(), default_registry())
    index = RuleIndex(defs.rules)
    # Exactly the labels the shipped GPUXidError rule (deploy/monitoring) gives its alerts.
    xid = {"alertname": "GPUXidError", "severity": "critical", "Hostname": "gpu-node-1",
           "UUID": "GPU-8e6a1c2d-0000-4000-8000-000000000001", "gpu": "0", "pci_bus_id": "00000000:1B:00.0",
           "xid": "79"}
    assert index.match(xid) == match_rules(xid, defs.rules)
    assert [m.rule.name for m in index.match(xid)][:1] == ["xid-reboot-node"]
    for alertname in {n for r in defs.rules for n in r.equality_alertnames()}:
        labels = {**xid, "alertname": alertname}
        assert index.match(labels) == match_rules(labels, defs.rules)

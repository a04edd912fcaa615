"""match_rules: enabled rules whose matchers all hold, highest priority first, file order on ties."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from remediator.definitions import Rule
from remediator.definitions.matching import RuleIndex, match_rules
from remediator.engine.planning import match_labels
from remediator.intake.normalize import normalize


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

    settings = Settings()
    defs = load_defs(settings, default_registry())
    index = RuleIndex(defs.rules)

    def routed(labels: dict[str, str]) -> Mapping[str, str]:
        """The labels the controller matches rules against (planning.propose): the alert's, with the Xid's
        immediate action (`xid_action`) derived from the catalog when the source did not decode it."""
        alert = normalize(labels, {}, status="firing", fingerprint="f", kinds=defs.alert_kinds,
                          node_precedence=settings.node_label_precedence)
        return match_labels(alert, defs)

    # Exactly the labels the shipped GPUXidError rule (deploy/monitoring) gives its alerts.
    xid = {"alertname": "GPUXidError", "severity": "critical", "Hostname": "gpu-node-1",
           "UUID": "GPU-8e6a1c2d-0000-4000-8000-000000000001", "gpu": "0", "pci_bus_id": "00000000:1B:00.0",
           "xid": "79"}
    assert index.match(xid) == match_rules(xid, defs.rules)
    # The Xid rules route on xid_action, which DCGM's alert does not carry: the controller adds it.
    labels = routed(xid)
    assert labels["xid_action"] == "RESTART_BM"
    assert index.match(labels) == match_rules(labels, defs.rules)
    assert [m.rule.name for m in index.match(labels)][:1] == ["xid-reboot-node"]
    names = {n for r in defs.rules for n in r.equality_alertnames()} | {"", "NotARuleAlert"}
    for alertname in names:
        for code in (13, 31, 48, 63, 74, 79, 94, 95, 119, 151, 154):
            for extra in ({}, {"gpu_instance": "3"}):
                labels = routed({**xid, "alertname": alertname, "xid": str(code), **extra})
                assert index.match(labels) == match_rules(labels, defs.rules), (alertname, code, extra)

"""Guardrail decisions (pure): pause, opt-out, circuit breaker by count, rate limit, maintenance windows."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time

from remediator.domain.guardrails import GuardrailFacts, MaintenanceWindow, guardrail_verdict
from remediator.settings import QuarantineLimit

BASE = GuardrailFacts(
    now=datetime(2026, 12, 2, 12, 0, tzinfo=UTC), paused=False, node="n1", node_excluded=False, quarantines=True,
    quarantined_nodes=frozenset(), limit_nodes=2, gpu_nodes=10, recent_quarantine_starts=0, rate_limit=5,
)


def test_allows_by_default_and_marks_quarantine() -> None:
    v = guardrail_verdict(BASE)
    assert v.allow and v.quarantines


def test_pause_wins() -> None:
    v = guardrail_verdict(replace(BASE, paused=True))
    assert not v.allow and v.name == "paused"


def test_opt_out_label() -> None:
    v = guardrail_verdict(replace(BASE, node_excluded=True))
    assert not v.allow and v.name == "opt_out" and "remediator.io/exclude" in v.reason


def test_breaker_counts_other_nodes_but_not_the_same_node() -> None:
    full = replace(BASE, quarantined_nodes=frozenset({"a", "b"}))
    v = guardrail_verdict(full)
    assert not v.allow and v.name == "circuit_breaker" and "2 of at most 2" in v.reason
    assert guardrail_verdict(replace(full, node="a")).allow


def test_room_under_the_breaker_goes_to_those_held_before() -> None:
    one_free = replace(BASE, quarantined_nodes=frozenset({"a"}))
    v = guardrail_verdict(replace(one_free, queued_ahead=1))
    assert not v.allow and v.name == "circuit_breaker" and "1 held before this one" in v.reason
    assert guardrail_verdict(replace(one_free, queued_ahead=0)).allow
    assert guardrail_verdict(replace(one_free, queued_ahead=1, node="a")).allow  # its node is quarantined already


def test_non_quarantining_playbooks_ignore_the_breaker() -> None:
    assert guardrail_verdict(replace(BASE, quarantines=False, quarantined_nodes=frozenset({"a", "b", "c"}))).allow


def test_rate_limit() -> None:
    v = guardrail_verdict(replace(BASE, recent_quarantine_starts=5))
    assert not v.allow and v.name == "rate_limit"


def test_maintenance_windows() -> None:
    hold = MaintenanceWindow(time(11, 0), time(13, 0), "hold")
    assert guardrail_verdict(replace(BASE, windows=(hold,))).name == "maintenance"
    allow_night = MaintenanceWindow(time(22, 0), time(4, 0), "allow")
    assert not guardrail_verdict(replace(BASE, windows=(allow_night,))).allow
    assert guardrail_verdict(replace(BASE, windows=(allow_night,), now=datetime(2026, 12, 2, 23, 0, tzinfo=UTC))).allow


def test_percent_limit_resolves_against_fleet_size() -> None:
    assert QuarantineLimit("5%").resolve(200) == 10
    assert QuarantineLimit("5%").resolve(3) == 1
    assert QuarantineLimit("7").resolve(1000) == 7


def test_one_builder_takes_limits_rate_repeat_limit_and_windows_from_the_settings() -> None:
    from remediator.domain.guardrails import FleetState, guardrail_facts
    from remediator.settings import Settings

    settings = Settings(max_quarantined_nodes="10%", quarantine_rate=7, node_repeat_limit=3,  # type: ignore[arg-type]
                        maintenance_windows=["hold 11:00-13:00"])
    facts = guardrail_facts(settings, now=BASE.now, node="n1", node_excluded=False, quarantines=True,
                            fleet=FleetState(gpu_nodes=50, recent_quarantine_starts=2))
    assert (facts.limit_nodes, facts.rate_limit, facts.node_repeat_limit) == (5, 7, 3)
    assert facts.windows == (MaintenanceWindow(time(11), time(13), "hold"),)
    assert guardrail_verdict(facts).name == "maintenance"  # 12:00 is inside the hold window
    # A fleet with its own limit (a playbook test's) wins over the settings' rule.
    own = guardrail_facts(settings, now=BASE.now, node="n1", node_excluded=False, quarantines=True,
                          fleet=FleetState(gpu_nodes=50, limit_nodes=1))
    assert own.limit_nodes == 1


def test_simulate_and_admission_see_the_same_maintenance_window() -> None:
    """`remediator simulate` builds its facts with the same builder: a hold window in the settings holds there
    too (before, simulate left the windows out and said it would start)."""
    import json

    from remediator.settings import Settings
    from remediator.tools.simulation import simulate_payload
    from tests.helpers import am_alert, am_payload, xid_labels

    settings = Settings(maintenance_windows=["hold 00:00-12:00", "hold 12:00-00:00"])  # type: ignore[arg-type]
    report = simulate_payload(settings, json.dumps(am_payload(am_alert(xid_labels("gpu-1", 79)))))
    assert report["alerts"][0]["guardrails"]["guardrail"] == "maintenance", report

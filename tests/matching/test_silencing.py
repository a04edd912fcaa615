"""Silence matchers: amtool's syntax, Alertmanager's anchoring and validation, RE2's linear time, the caches."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.domain.silences import (
    ActiveSilence,
    SilenceMatcher,
    SilenceSet,
    compiled,
    matcher_text,
    parse_matchers,
    state_of,
    validate_matchers,
)
from remediator.errors import MatcherError
from tests.approvals.harness import gated_controller
from tests.helpers import am_alert, am_payload, xid_labels


def test_amtool_matchers() -> None:
    assert parse_matchers(["GPUXidError", 'Hostname=~"gpu-node-1[0-9]"', "xid!=13", "name!~re"]) == [
        SilenceMatcher("alertname", "GPUXidError"), SilenceMatcher("Hostname", "gpu-node-1[0-9]", is_regex=True),
        SilenceMatcher("xid", "13", is_equal=False), SilenceMatcher("name", "re", is_regex=True, is_equal=False),
    ]
    assert parse_matchers(['{a="x, y", b!="q\\"z"}']) == [
        SilenceMatcher("a", "x, y"), SilenceMatcher("b", 'q"z', is_equal=False)
    ]
    # a spurious escape is kept, as amtool does
    assert parse_matchers(['a="\\d+\\n"']) == [SilenceMatcher("a", "\\d+\n")]
    for bad, problem in (('a="x', "closing quote"), ("=x", "not a matcher"), ('a=x"', "quote")):
        with pytest.raises(ValueError, match=problem):
            parse_matchers(["alertname=X", bad])
    m = SilenceMatcher("a", 'q"z\\', is_regex=True, is_equal=False)
    assert parse_matchers([matcher_text(m)]) == [m]


def test_matching_is_anchored_and_a_missing_label_is_empty() -> None:
    regex = SilenceMatcher("Hostname", "gpu-node-1[0-9]", is_regex=True)
    assert regex.matches({"Hostname": "gpu-node-12"})
    for other in ("gpu-node-1", "gpu-node-100", "xgpu-node-12", "gpu-node-12\n"):
        assert not regex.matches({"Hostname": other}), other
    assert SilenceMatcher("pool", "", is_equal=True).matches({})
    assert SilenceMatcher("pool", "a.*", is_regex=True, is_equal=False).matches({})
    assert not SilenceMatcher("xid", "13", is_equal=False).matches({"xid": "13"})
    assert SilenceMatcher("xid", "13", is_equal=False).matches({"xid": "79"})


def test_validation_follows_alertmanager() -> None:
    def field(*matchers: SilenceMatcher) -> str:
        with pytest.raises(MatcherError) as caught:
            validate_matchers(list(matchers))
        return caught.value.field

    assert field() == "matchers"
    assert field(SilenceMatcher("a", "(", is_regex=True)) == "matchers[0].value"
    no_lookaround = SilenceMatcher("b", "(?=x)", is_regex=True)
    assert field(SilenceMatcher("a", "x"), no_lookaround) == "matchers[1].value"
    assert field(SilenceMatcher("a", "(x)\\1", is_regex=True)) == "matchers[0].value"  # no backreferences
    assert field(SilenceMatcher("a", ".*", is_regex=True), SilenceMatcher("b", "x", is_equal=False)) == "matchers"
    validate_matchers([SilenceMatcher("a", ".*", is_regex=True), SilenceMatcher("b", "x")])


def test_state_of() -> None:
    now = datetime(2026, 12, 5, 12, tzinfo=UTC)
    hour = timedelta(hours=1)
    assert state_of(now - hour, now + hour, now) == "active"
    assert state_of(now + hour, now + 2 * hour, now) == "pending"
    assert state_of(now - hour, now, now) == "expired"


def test_a_flood_is_matched_in_linear_time_with_patterns_compiled_once() -> None:
    # (a+)+$ backtracks exponentially in Python's re; RE2 answers in linear time.
    silences = [
        ActiveSilence(f"s{i}", (SilenceMatcher("Hostname", f"rack-{i}-(a+)+", is_regex=True),), "x", "y",
                      datetime(2030, 1, 1, tzinfo=UTC))
        for i in range(50)
    ]
    compiled.cache_clear()
    held = SilenceSet(silences)
    assert compiled.cache_info().misses == 50
    labels = [{"Hostname": "rack-7-" + "a" * 40 + "b", "alertname": "X"} for _ in range(2000)]
    started = time.perf_counter()
    assert all(held.match(lab) is None for lab in labels)
    assert held.match({"Hostname": "rack-49-aaa"}) is silences[49]
    assert time.perf_counter() - started < 5.0  # 100,000 regex matches; with backtracking this would not end
    assert compiled.cache_info().misses == 50  # each pattern compiled once, however many alerts


async def test_a_decision_batch_reads_the_silences_once(tmp_path: Path) -> None:
    async with gated_controller(tmp_path) as gated:
        reads: list[datetime] = []
        original = gated.rt.repo.active_silences

        async def counted(now: datetime) -> list[ActiveSilence]:
            reads.append(now)
            return await original(now)

        gated.rt.repo.active_silences = counted  # type: ignore[method-assign]
        alerts = [am_alert(xid_labels(f"gpu-node-{i}", 79)) for i in range(40)]
        r = await gated.client.post("/api/v1/alerts", json=am_payload(*alerts),
                                    headers={"Authorization": "Bearer api-token"})
        assert r.status_code == 200
        await gated.worker.process_alerts()
        assert len(reads) == 1

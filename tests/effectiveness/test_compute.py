"""Outcomes, MTTR, recurrences, rungs and the edited-ladder re-play, from known remediation histories."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from remediator.engine.effectiveness import (
    compute_effectiveness,
    facts_of,
    parse_ladder,
    percentile,
    replay_ladder,
    window_label,
)

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
H = timedelta(hours=1)
LADDER = ["reset-gpu", "reboot-node", "rma-gpu"]


@dataclass
class Rem:
    id: str
    created: timedelta
    finished: timedelta | None = None
    state: str = "succeeded"
    playbook: str = "reset-gpu"
    gpu_uuid: str | None = "GPU-a"
    node: str | None = "node-1"
    quarantined: bool = False
    xid: int | None = 79
    model: str | None = "NVIDIA H100 80GB HBM3"
    starts_at: timedelta | None = None
    escalation: dict[str, Any] | None = None
    alert_labels: dict[str, Any] = field(default_factory=dict)

    @property
    def created_at(self) -> datetime:
        return T0 + self.created

    @property
    def finished_at(self) -> datetime | None:
        return None if self.finished is None else T0 + self.finished

    @property
    def plan(self) -> dict[str, Any]:
        starts = (T0 + self.starts_at).isoformat() if self.starts_at is not None else ""
        plan: dict[str, Any] = {"alert": {"starts_at": starts, "model": self.model}, "xid": {"code": self.xid},
                                "playbook": {"name": self.playbook, "steps": []}}
        if self.escalation is not None:
            plan["escalation"] = self.escalation
        return plan


def esc(source: str, reason: str, rung: int, seconds: float | None = None) -> dict[str, Any]:
    return {"from": source, "reason": reason, "rung": rung, "ladder": LADDER, "recurrence_seconds": seconds,
            "history": [], "gate": None}


def outcomes(rems: list[Rem], now: timedelta, window: timedelta = 24 * H) -> dict[str, str]:
    report = compute_effectiveness(rems, now=T0 + now, window=window)
    return {a.remediation_id: a.outcome for a in report.assessments}


def test_a_fault_within_the_window_after_the_return_is_a_recurrence() -> None:
    rems = [Rem("r1", 0 * H, finished=1 * H), Rem("r2", 11 * H, finished=12 * H)]
    report = compute_effectiveness(rems, now=T0 + 100 * H)
    assert {a.remediation_id: a.outcome for a in report.assessments} == {"r1": "recurred", "r2": "healed"}
    [rec] = report.recurrences
    assert (rec.remediation_id, rec.recurred_by, rec.subject, rec.xid) == ("r1", "r2", "GPU-a", "79")
    assert rec.seconds == pytest.approx(10 * 3600)


def test_a_fault_after_the_window_leaves_the_first_run_healed() -> None:
    rems = [Rem("r1", 0 * H, finished=1 * H), Rem("r2", 30 * H, finished=31 * H)]
    assert outcomes(rems, now=100 * H) == {"r1": "healed", "r2": "healed"}
    # The window is a parameter: with 7 days the same history is a recurrence.
    assert outcomes(rems, now=400 * H, window=timedelta(days=7))["r1"] == "recurred"


def test_faults_of_other_gpus_do_not_count_but_node_level_runs_see_every_gpu_of_their_node() -> None:
    rems = [
        Rem("gpu-a", 0 * H, finished=1 * H),
        Rem("gpu-b", 2 * H, finished=3 * H, gpu_uuid="GPU-b"),
        Rem("whole-node", 4 * H, finished=5 * H, gpu_uuid=None, playbook="reboot-node"),
        Rem("later-on-b", 6 * H, finished=7 * H, gpu_uuid="GPU-b", state="cancelled"),
    ]
    got = outcomes(rems, now=100 * H)
    assert got == {"gpu-a": "healed", "gpu-b": "recurred", "whole-node": "recurred"}
    # A cancelled remediation is no run, but still a fault of its GPU.
    assert "later-on-b" not in got


def test_a_failed_gate_escalation_is_escalated_and_never_healed() -> None:
    rems = [
        Rem("reset", 0 * H, finished=1 * H, state="failed"),
        Rem("reboot", 1 * H, finished=2 * H, playbook="reboot-node", escalation=esc("reset", "gate_failed", 2)),
    ]
    report = compute_effectiveness(rems, now=T0 + 100 * H)
    assert {a.remediation_id: a.outcome for a in report.assessments} == {"reset": "escalated", "reboot": "healed"}
    by_playbook = {c.key: c for c in report.by_playbook}
    assert by_playbook["reset-gpu"].escalated == 1 and by_playbook["reset-gpu"].escalation_pct == 100.0
    assert report.recurrences == []


def test_a_recurrence_escalation_counts_as_recurred_with_its_own_time() -> None:
    rems = [
        Rem("reset", 0 * H, finished=1 * H),
        Rem("reboot", 40 * H, playbook="reboot-node", state="running",
            escalation=esc("reset", "recurrence", 2, seconds=123.0)),
    ]
    report = compute_effectiveness(rems, now=T0 + 100 * H)
    assert {a.remediation_id: a.outcome for a in report.assessments} == {"reset": "recurred", "reboot": "open"}
    [rec] = report.recurrences
    assert rec.recurred_by == "reboot" and rec.seconds == 123.0


def test_open_while_not_returned_or_while_the_window_runs() -> None:
    rems = [
        Rem("running", 0 * H, state="running"),
        Rem("kept-quarantined", 0 * H, finished=1 * H, gpu_uuid="GPU-q", quarantined=True),
        Rem("young", 0 * H, finished=10 * H, gpu_uuid="GPU-y"),
        Rem("reverted", 0 * H, finished=2 * H, gpu_uuid="GPU-r", state="reverted"),
        Rem("pending", 0 * H, state="pending", gpu_uuid="GPU-p"),
    ]
    got = outcomes(rems, now=30 * H)
    assert got == {"running": "open", "kept-quarantined": "open", "young": "open", "reverted": "healed"}
    report = compute_effectiveness(rems, now=T0 + 30 * H)
    assert report.totals.runs == 4 and report.totals.decided == 1
    assert report.totals.healed_pct == 100.0  # of decided runs only


def test_mttr_from_the_alert_start_with_percentiles() -> None:
    # Times to return: 1 h, 2 h, 3 h, 4 h (the first from its alert's start, 30 min before it was created).
    rems = [
        Rem("a", 0 * H, finished=30 * timedelta(minutes=1), starts_at=-30 * timedelta(minutes=1), gpu_uuid="G1"),
        Rem("b", 0 * H, finished=2 * H, gpu_uuid="G2"),
        Rem("c", 0 * H, finished=3 * H, gpu_uuid="G3", state="reverted"),
        Rem("d", 0 * H, finished=4 * H, gpu_uuid="G4"),
        Rem("e", 0 * H, state="failed", gpu_uuid="G5"),
    ]
    report = compute_effectiveness(rems, now=T0 + 100 * H)
    assert sorted(a.time_to_return_seconds or 0 for a in report.assessments) == [0, 3600, 7200, 10800, 14400]
    assert report.totals.mttr_p50_seconds == pytest.approx(2.5 * 3600)
    assert report.totals.mttr_p90_seconds == pytest.approx(3.7 * 3600)
    assert percentile([], 50) is None and percentile([5.0], 90) == 5.0


def test_groups_by_playbook_xid_and_model() -> None:
    rems = [
        Rem("r1", 0 * H, finished=1 * H, xid=79),
        Rem("r2", 2 * H, finished=3 * H, xid=48),
        Rem("r3", 0 * H, finished=1 * H, gpu_uuid="GPU-z", xid=None, model=None, playbook="drain-node",
            alert_labels={"modelName": "NVIDIA A100"}),
    ]
    report = compute_effectiveness(rems, now=T0 + 100 * H)
    xid = {c.key: (c.runs, c.recurred, c.healed) for c in report.by_xid}
    assert xid == {"79": (1, 1, 0), "48": (1, 0, 1), "none": (1, 0, 1)}
    model = {c.key: c.runs for c in report.by_model}
    assert model == {"NVIDIA H100 80GB HBM3": 2, "NVIDIA A100": 1}
    playbook = {c.key: c.as_dict() for c in report.by_playbook}
    assert playbook["reset-gpu"]["healed_pct"] == 50.0 and playbook["reset-gpu"]["recurrence_pct"] == 50.0


def test_rungs_count_each_subjects_latest_remediation() -> None:
    rems = [
        Rem("a1", 0 * H, finished=1 * H, state="failed", gpu_uuid="GPU-a"),
        Rem("a2", 1 * H, finished=2 * H, playbook="reboot-node", gpu_uuid="GPU-a",
            escalation=esc("a1", "gate_failed", 2)),
        Rem("b1", 0 * H, playbook="reboot-node", gpu_uuid="GPU-b", escalation=esc("x", "recurrence", 2)),
        Rem("b2", 5 * H, playbook="rma-gpu", gpu_uuid="GPU-b", state="awaiting_approval",
            escalation=esc("b1", "recurrence", 3)),
        Rem("c1", 0 * H, playbook="reboot-node", gpu_uuid="GPU-c", escalation=esc("y", "recurrence", 2)),
        Rem("c2", 5 * H, playbook="rma-gpu", gpu_uuid="GPU-c", state="cancelled",
            escalation=esc("c1", "recurrence", 3)),
        Rem("d1", 0 * H, gpu_uuid="GPU-d"),
    ]
    report = compute_effectiveness(rems, now=T0 + 100 * H)
    assert [s.subject for s in report.rung_2] == ["GPU-a", "GPU-c"]  # c's rung-3 run was cancelled
    assert [(s.subject, s.remediation_id) for s in report.rung_3_plus] == [("GPU-b", "b2")]
    assert report.as_dict()["rungs"]["rung_3_plus"] == 1


def test_edited_ladder_replay_climbs_on_recurrence_and_gate_failure() -> None:
    rems = [
        # GPU-a: a reset, a fault 2 h after its return (climbs), then a fault a week later (starts over).
        Rem("a1", 0 * H, finished=1 * H, gpu_uuid="GPU-a"),
        Rem("a2", 3 * H, finished=4 * H, gpu_uuid="GPU-a"),
        Rem("a3", 200 * H, finished=201 * H, gpu_uuid="GPU-a"),
        # GPU-b: a reset failed its gate and was escalated to a reboot, which came back 1 h later.
        Rem("b1", 0 * H, finished=1 * H, state="failed", gpu_uuid="GPU-b"),
        Rem("b2", 1 * H, finished=2 * H, playbook="reboot-node", gpu_uuid="GPU-b",
            escalation=esc("b1", "gate_failed", 2)),
        Rem("b3", 3 * H, playbook="rma-gpu", gpu_uuid="GPU-b", state="running",
            escalation=esc("b2", "recurrence", 3, 3600.0)),
        # A playbook on no ladder keeps its runs.
        Rem("t1", 0 * H, finished=1 * H, playbook="thermal-throttle", gpu_uuid="GPU-a"),
    ]
    as_is = replay_ladder(rems, LADDER, window=24 * H)
    rows = {r.playbook: (r.as_run, r.edited) for r in as_is.rows}
    assert rows == {"reset-gpu": (4, 3), "reboot-node": (1, 2), "rma-gpu": (1, 1), "thermal-throttle": (1, 1)}
    assert (as_is.last_rung_as_run, as_is.last_rung_edited) == (1, 1)
    assert as_is.moved == 1  # a2: the reset 2 h after a return would have been a reboot

    # Without the reboot rung, a recurrence after a reset goes straight to RMA.
    edited = replay_ladder(rems, ["reset-gpu", "rma-gpu"], window=24 * H)
    rows = {r.playbook: (r.as_run, r.edited) for r in edited.rows}
    assert rows["rma-gpu"] == (1, 3) and rows["reset-gpu"] == (4, 3) and rows["reboot-node"] == (1, 0)
    assert edited.last_rung_edited == 2 and edited.last_rung_as_run == 1
    assert edited.moved == 2
    assert edited.as_dict()["subjects_at_last_rung_edited"] == 2


def test_facts_keep_what_the_report_reads() -> None:
    rems = [Rem("r1", 0 * H, finished=1 * H), Rem("r2", 2 * H, finished=3 * H, escalation=esc("r1", "recurrence", 2))]
    facts = [facts_of(r) for r in rems]
    assert "playbook" not in facts[0].plan and facts[1].plan["escalation"]["from"] == "r1"
    full = compute_effectiveness(rems, now=T0 + 100 * H).as_dict()
    assert compute_effectiveness(facts, now=T0 + 100 * H).as_dict() == full


def test_ladders_and_window_labels() -> None:
    assert parse_ladder(" reset-gpu, reboot-node ,rma-gpu") == ("reset-gpu", "reboot-node", "rma-gpu")
    for bad in ("", " , ", "a,b,a"):
        with pytest.raises(ValueError):
            parse_ladder(bad)
    assert window_label(timedelta(hours=24)) == "24h" and window_label(timedelta(days=7)) == "7d"
    with pytest.raises(ValueError):
        compute_effectiveness([], now=T0, window=timedelta(0))

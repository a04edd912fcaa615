"""What each remediation achieved: healed, recurred, escalated or still open, and how fast GPUs came back.

Pure (no I/O): the report is computed from remediation-like objects (stored rows or test doubles), a
recurrence window W and the time `now`, so the API, the UI page and the CLI agree and tests need no store.

Terms used throughout:

- a remediation *returned to service* at `finished_at` when it ended `reverted`, or `succeeded` without
  leaving its target quarantined; any other remediation has not returned;
- its *subject* is its GPU (`gpu_uuid`), else its node (`node:<name>`). A later remediation S is a new fault
  of R's subject when both name the same GPU, or, for a node-level R, when S is on the same node;
- its *outcome*: `escalated` when another remediation escalates it after a failed validation gate
  (`plan.escalation.reason == "gate_failed"`); `recurred` when, after it returned at t, the first new fault
  of its subject was created within (t, t + W] (or a remediation escalates it with reason `recurrence`);
  `healed` when it returned at t, `now >= t + W` and no fault came; `failed` when it ended `failed` (a step
  or its return gate failed and nothing took over: it never returns by itself, so it is not open); `open`
  otherwise (it has not returned and has not ended, or its window is still running);
- its *rung*: `plan.escalation.rung`, else 1 (the first playbook of a ladder).

Only remediations that acted count as runs (states running, succeeded, failed, reverting, reverted); every
remediation, whatever its state, is evidence of a fault of its subject when looking for recurrences.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol

from remediator.domain.durations import format_duration
from remediator.domain.json_values import JsonObject, JsonValue
from remediator.domain.plan_snapshot import stored_alert_field, stored_xid_code
from remediator.domain.states import State, returned_at
from remediator.domain.timestamps import as_utc

__all__ = [
    "ACTED_STATES",
    "DEFAULT_WINDOW",
    "RECURRENCE_WINDOWS",
    "Assessment",
    "EffectivenessReport",
    "LadderComparison",
    "LadderRow",
    "Outcome",
    "OutcomeCounts",
    "RemediationFacts",
    "RemediationLike",
    "ReportedRecurrence",
    "SubjectRung",
    "assess",
    "compute_effectiveness",
    "facts_of",
    "parse_ladder",
    "percentile",
    "render_ladder_text",
    "render_text",
    "replay_ladder",
    "subject_of",
    "window_label",
]

Outcome = Literal["healed", "recurred", "escalated", "failed", "open"]
OUTCOMES: tuple[Outcome, ...] = ("healed", "recurred", "escalated", "failed", "open")

DEFAULT_WINDOW = timedelta(hours=24)
# The windows the recurrence counter is labelled with ("24h", "7d").
RECURRENCE_WINDOWS: tuple[timedelta, ...] = (timedelta(hours=24), timedelta(days=7))

# States in which a remediation has acted on its target: the runs the report counts.
ACTED_STATES = frozenset({State.RUNNING, State.SUCCEEDED, State.PLANNED, State.FAILED, State.REVERTING, State.REVERTED})
# States that never acted and never will: not a rung a subject stands on.
_NEVER_ACTED = frozenset({State.CANCELLED, State.REJECTED, State.EXPIRED})
NO_XID = "none"
NO_MODEL = "unknown"


class RemediationLike(Protocol):
    """What the report reads of a remediation (a `store.models.Remediation` fits)."""

    @property
    def id(self) -> str: ...

    @property
    def created_at(self) -> datetime: ...

    @property
    def finished_at(self) -> datetime | None: ...

    @property
    def state(self) -> str: ...

    @property
    def playbook(self) -> str: ...

    @property
    def node(self) -> str | None: ...

    @property
    def gpu_uuid(self) -> str | None: ...

    @property
    def quarantined(self) -> bool: ...

    @property
    def alert_labels(self) -> Mapping[str, str]: ...

    @property
    def plan(self) -> Mapping[str, JsonValue]: ...


@dataclass(frozen=True)
class RemediationFacts:
    """Just what the report reads of a stored remediation, with the plan cut down to the keys it uses.

    Stored plans carry the whole playbook; keeping only these facts bounds the memory of a long history.
    """

    id: str
    created_at: datetime
    finished_at: datetime | None
    state: str
    playbook: str
    node: str | None
    gpu_uuid: str | None
    quarantined: bool
    alert_labels: Mapping[str, str]
    plan: Mapping[str, JsonValue]


def facts_of(rem: RemediationLike) -> RemediationFacts:
    """The facts of `rem` (plan keys `alert.starts_at`, `alert.model`, `xid.code` and `escalation`)."""
    plan = rem.plan or {}
    trimmed: JsonObject = {
        "alert": {"starts_at": stored_alert_field(plan, "starts_at"), "model": stored_alert_field(plan, "model")},
        "xid": {"code": stored_xid_code(plan)},
    }
    escalation = plan.get("escalation")
    if isinstance(escalation, Mapping):
        trimmed["escalation"] = dict(escalation)
    labels = rem.alert_labels or {}
    return RemediationFacts(
        id=rem.id, created_at=rem.created_at, finished_at=rem.finished_at, state=rem.state,
        playbook=rem.playbook, node=rem.node, gpu_uuid=rem.gpu_uuid, quarantined=bool(rem.quarantined),
        alert_labels={"modelName": labels["modelName"]} if labels.get("modelName") else {}, plan=trimmed,
    )


# -- small facts of one remediation -----------------------------------------------------------------------


def subject_of(rem: RemediationLike) -> str:
    """The GPU UUID, else `node:<node>`."""
    return rem.gpu_uuid or f"node:{rem.node or '-'}"


def _section(rem: RemediationLike, key: str) -> Mapping[str, JsonValue]:
    value = (rem.plan or {}).get(key)
    return value if isinstance(value, Mapping) else {}


def _escalation(rem: RemediationLike) -> Mapping[str, JsonValue]:
    return _section(rem, "escalation")


def _rung(rem: RemediationLike) -> int:
    rung = _escalation(rem).get("rung")
    return rung if isinstance(rung, int) and not isinstance(rung, bool) and rung >= 1 else 1


def _xid(rem: RemediationLike) -> str:
    code = _section(rem, "xid").get("code")
    if code is None or code == "":
        return NO_XID
    return str(code)


def _model(rem: RemediationLike) -> str:
    model = _section(rem, "alert").get("model") or (rem.alert_labels or {}).get("modelName")
    return str(model) if model else NO_MODEL


def _alert_start(rem: RemediationLike) -> datetime:
    raw = _section(rem, "alert").get("starts_at")
    if isinstance(raw, datetime):
        return as_utc(raw)
    if isinstance(raw, str) and raw:
        try:
            return as_utc(datetime.fromisoformat(raw.strip().replace("Z", "+00:00")))
        except ValueError:
            pass
    return rem.created_at


def _order(rem: RemediationLike) -> tuple[datetime, str]:
    return rem.created_at, rem.id


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def window_label(window: timedelta) -> str:
    """`timedelta(hours=24)` -> `24h`, `timedelta(days=7)` -> `7d`: the `window` label of the recurrence counter."""
    seconds = int(window.total_seconds())
    if seconds and seconds % 86400 == 0 and seconds // 86400 != 1:
        return f"{seconds // 86400}d"
    if seconds and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return format_duration(window)


# -- per-remediation assessment ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportedRecurrence:
    """A remediation whose subject faulted again within the window after it returned, as the report lists it
    (the decision's own fact is engine/decision.py: Recurrence)."""

    remediation_id: str
    subject: str
    playbook: str
    xid: str
    seconds: float
    recurred_by: str

    def as_dict(self) -> JsonObject:
        return {
            "remediation_id": self.remediation_id, "subject": self.subject, "playbook": self.playbook,
            "xid": self.xid, "time_to_recurrence_seconds": round(self.seconds, 3), "recurred_by": self.recurred_by,
        }


@dataclass(frozen=True)
class Assessment:
    """The outcome of one run, with what it is grouped by."""

    remediation_id: str
    subject: str
    playbook: str
    xid: str
    model: str
    rung: int
    outcome: Outcome
    returned_at: datetime | None
    time_to_return_seconds: float | None
    recurrence: ReportedRecurrence | None = None


class _Faults:
    """Every remediation as a fault of its GPU and of its node, in creation order, for bisecting by time."""

    def __init__(self, rems: Iterable[RemediationLike]) -> None:
        by_gpu: dict[str, list[tuple[datetime, str]]] = {}
        by_node: dict[str, list[tuple[datetime, str]]] = {}
        for rem in rems:
            if rem.gpu_uuid:
                by_gpu.setdefault(rem.gpu_uuid, []).append(_order(rem))
            if rem.node:
                by_node.setdefault(rem.node, []).append(_order(rem))
        for lists in (by_gpu, by_node):
            for faults in lists.values():
                faults.sort()
        self._gpu, self._node = by_gpu, by_node

    def first_after(self, rem: RemediationLike, t: datetime) -> tuple[datetime, str] | None:
        """The first fault of `rem`'s subject created strictly after `t`."""
        if rem.gpu_uuid:
            faults = self._gpu.get(rem.gpu_uuid, [])
        elif rem.node:
            faults = self._node.get(rem.node, [])
        else:
            return None
        i = bisect.bisect_right(faults, (t, "\U0010ffff"))
        return faults[i] if i < len(faults) else None


def _escalations(rems: Iterable[RemediationLike]) -> dict[tuple[str, str], RemediationLike]:
    """(escalated remediation id, reason) -> the first remediation that escalated it for that reason."""
    found: dict[tuple[str, str], RemediationLike] = {}
    for rem in sorted(rems, key=_order):
        esc = _escalation(rem)
        source, reason = esc.get("from"), esc.get("reason")
        if isinstance(source, str) and isinstance(reason, str):
            found.setdefault((source, reason), rem)
    return found


def assess(rems: Sequence[RemediationLike], *, window: timedelta, now: datetime) -> list[Assessment]:
    """The outcome of every run among `rems` (oldest first); the others only serve as faults and escalations."""
    now = as_utc(now)
    faults = _Faults(rems)
    escalations = _escalations(rems)
    out: list[Assessment] = []
    for rem in sorted((r for r in rems if r.state in ACTED_STATES), key=_order):
        back = returned_at(rem)
        subject, xid = subject_of(rem), _xid(rem)
        ttr = max(0.0, (back - _alert_start(rem)).total_seconds()) if back is not None else None
        outcome: Outcome = "open"
        recurrence: ReportedRecurrence | None = None
        if (rem.id, "gate_failed") in escalations:
            outcome = "escalated"
        elif (by := escalations.get((rem.id, "recurrence"))) is not None:
            given = _escalation(by).get("recurrence_seconds")
            if isinstance(given, int | float) and not isinstance(given, bool) and math.isfinite(given):
                seconds = float(given)
            else:
                seconds = max(0.0, (by.created_at - (back or rem.created_at)).total_seconds())
            outcome = "recurred"
            recurrence = ReportedRecurrence(rem.id, subject, rem.playbook, xid, seconds, by.id)
        elif back is not None:
            nxt = faults.first_after(rem, back)
            if nxt is not None and nxt[0] <= back + window:
                outcome = "recurred"
                after = (nxt[0] - back).total_seconds()
                recurrence = ReportedRecurrence(rem.id, subject, rem.playbook, xid, after, nxt[1])
            elif now >= back + window:
                outcome = "healed"
        elif rem.state == State.FAILED:
            outcome = "failed"
        out.append(Assessment(rem.id, subject, rem.playbook, xid, _model(rem), _rung(rem), outcome, back, ttr,
                              recurrence))
    return out


# -- the report -------------------------------------------------------------------------------------------


@dataclass
class OutcomeCounts:
    """Runs and outcomes of one group (a playbook, an Xid code, a GPU model, or everything).

    `healed_pct`, `recurrence_pct` and `escalation_pct` are shares of the *decided* runs
    (healed + recurred + escalated + failed): runs still open are left out, so a young run does not count as a
    success before its window has passed.
    """

    key: str
    runs: int = 0
    healed: int = 0
    recurred: int = 0
    escalated: int = 0
    failed: int = 0
    open: int = 0
    time_to_return: list[float] = field(default_factory=list, repr=False)

    def add(self, a: Assessment) -> None:
        self.runs += 1
        setattr(self, a.outcome, getattr(self, a.outcome) + 1)
        if a.time_to_return_seconds is not None:
            self.time_to_return.append(a.time_to_return_seconds)

    @property
    def decided(self) -> int:
        return self.healed + self.recurred + self.escalated + self.failed

    def _pct(self, part: int) -> float | None:
        return round(100.0 * part / self.decided, 2) if self.decided else None

    @property
    def healed_pct(self) -> float | None:
        return self._pct(self.healed)

    @property
    def recurrence_pct(self) -> float | None:
        return self._pct(self.recurred)

    @property
    def escalation_pct(self) -> float | None:
        return self._pct(self.escalated)

    @property
    def mttr_p50_seconds(self) -> float | None:
        return percentile(self.time_to_return, 50)

    @property
    def mttr_p90_seconds(self) -> float | None:
        return percentile(self.time_to_return, 90)

    def as_dict(self) -> JsonObject:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        return {
            "key": self.key, "runs": self.runs, "healed": self.healed, "recurred": self.recurred,
            "escalated": self.escalated, "failed": self.failed, "open": self.open, "decided": self.decided,
            "healed_pct": self.healed_pct, "recurrence_pct": self.recurrence_pct,
            "escalation_pct": self.escalation_pct, "returned": len(self.time_to_return),
            "mttr_p50_seconds": rounded(self.mttr_p50_seconds), "mttr_p90_seconds": rounded(self.mttr_p90_seconds),
        }


@dataclass(frozen=True)
class SubjectRung:
    """A GPU (or node) and the ladder rung of its latest remediation."""

    subject: str
    rung: int
    remediation_id: str
    playbook: str
    state: str
    created_at: datetime

    def as_dict(self) -> JsonObject:
        return {"subject": self.subject, "rung": self.rung, "remediation_id": self.remediation_id,
                "playbook": self.playbook, "state": self.state, "created_at": self.created_at.isoformat()}


@dataclass
class EffectivenessReport:
    generated_at: datetime
    since: datetime | None
    window: timedelta
    totals: OutcomeCounts
    by_playbook: list[OutcomeCounts]
    by_xid: list[OutcomeCounts]
    by_model: list[OutcomeCounts]
    recurrences: list[ReportedRecurrence]
    rung_2: list[SubjectRung]
    rung_3_plus: list[SubjectRung]
    assessments: list[Assessment] = field(default_factory=list, repr=False)

    def as_dict(self) -> JsonObject:
        return {
            "generated_at": self.generated_at.isoformat(),
            "since": self.since.isoformat() if self.since else None,
            "window": window_label(self.window),
            "window_seconds": self.window.total_seconds(),
            "totals": self.totals.as_dict(),
            "by_playbook": [c.as_dict() for c in self.by_playbook],
            "by_xid": [c.as_dict() for c in self.by_xid],
            "by_model": [c.as_dict() for c in self.by_model],
            "recurrences": [r.as_dict() for r in self.recurrences],
            "rungs": {
                "rung_2": len(self.rung_2),
                "rung_3_plus": len(self.rung_3_plus),
                "subjects_rung_2": [s.as_dict() for s in self.rung_2],
                "subjects_rung_3_plus": [s.as_dict() for s in self.rung_3_plus],
            },
        }


def _grouped(assessments: Iterable[Assessment], key: str) -> list[OutcomeCounts]:
    groups: dict[str, OutcomeCounts] = {}
    for a in assessments:
        name = str(getattr(a, key))
        groups.setdefault(name, OutcomeCounts(name)).add(a)
    return sorted(groups.values(), key=lambda c: (-c.runs, c.key))


def _latest_rungs(rems: Iterable[RemediationLike]) -> dict[str, SubjectRung]:
    latest: dict[str, RemediationLike] = {}
    for rem in rems:
        if rem.state in _NEVER_ACTED:
            continue
        subject = subject_of(rem)
        if subject not in latest or _order(rem) > _order(latest[subject]):
            latest[subject] = rem
    return {
        s: SubjectRung(s, _rung(r), r.id, r.playbook, r.state, r.created_at) for s, r in latest.items()
    }


def compute_effectiveness(
    rems: Sequence[RemediationLike],
    *,
    now: datetime,
    window: timedelta = DEFAULT_WINDOW,
    since: datetime | None = None,
) -> EffectivenessReport:
    """The report over `rems` (every remediation created since `since`, in any state; order does not matter).

    Rung counts take each subject's latest remediation that has acted or may still act (not cancelled,
    rejected or expired).
    """
    if window <= timedelta(0):
        raise ValueError("window must be positive")
    assessments = assess(rems, window=window, now=now)
    totals = OutcomeCounts("all")
    for a in assessments:
        totals.add(a)
    rungs = sorted(_latest_rungs(rems).values(), key=lambda s: (-s.rung, s.subject))
    recurrences = sorted((a.recurrence for a in assessments if a.recurrence), key=lambda r: r.seconds)
    return EffectivenessReport(
        generated_at=as_utc(now), since=as_utc(since) if since else None, window=window, totals=totals,
        by_playbook=_grouped(assessments, "playbook"), by_xid=_grouped(assessments, "xid"),
        by_model=_grouped(assessments, "model"), recurrences=recurrences,
        rung_2=[s for s in rungs if s.rung == 2], rung_3_plus=[s for s in rungs if s.rung >= 3],
        assessments=assessments,
    )


# -- re-playing history under an edited ladder ------------------------------------------------------------


def parse_ladder(text: str) -> tuple[str, ...]:
    """`reset-gpu,reboot-node,rma-gpu` -> the ladder; ValueError when empty or a playbook repeats."""
    ladder = tuple(p.strip() for p in text.split(",") if p.strip())
    if not ladder:
        raise ValueError("a ladder names at least one playbook, e.g. reset-gpu,reboot-node,rma-gpu")
    repeated = sorted({p for p in ladder if ladder.count(p) > 1})
    if repeated:
        raise ValueError(f"a ladder names each playbook once: {', '.join(repeated)} repeated")
    return ladder


@dataclass(frozen=True)
class LadderRow:
    playbook: str
    as_run: int
    edited: int

    def as_dict(self) -> JsonObject:
        return {"playbook": self.playbook, "as_run": self.as_run, "edited": self.edited,
                "change": self.edited - self.as_run}


@dataclass
class LadderComparison:
    """How many runs each playbook had, and would have had under `ladder`, with the same faults."""

    ladder: tuple[str, ...]
    window: timedelta
    rows: list[LadderRow]
    runs: int
    moved: int
    subjects: int
    last_rung_as_run: int
    last_rung_edited: int

    def as_dict(self) -> JsonObject:
        return {
            "ladder": list(self.ladder), "window": window_label(self.window), "runs": self.runs,
            "moved": self.moved, "subjects": self.subjects, "last_rung": self.ladder[-1],
            "subjects_at_last_rung_as_run": self.last_rung_as_run,
            "subjects_at_last_rung_edited": self.last_rung_edited,
            "playbooks": [r.as_dict() for r in self.rows],
        }


def replay_ladder(
    rems: Sequence[RemediationLike], ladder: Sequence[str], *, window: timedelta = DEFAULT_WINDOW
) -> LadderComparison:
    """Re-play each subject's runs, in creation order, under `ladder`.

    A run is on a ladder when its playbook is in `ladder` or in a ladder recorded in some run's
    `plan.escalation` (or it was itself an escalation); other runs keep their playbook. A ladder run that
    comes within `window` after the subject's previous ladder run returned, or after that run failed its
    gate, climbs one rung above the previous run's rung under `ladder` (never past the last); any other
    starts at the rung of the playbook it ran (rung 1 when that playbook is not in `ladder`). The faults
    stay as they happened: a different playbook might have healed what the one that ran did not.
    """
    ladder = tuple(ladder)
    if not ladder:
        raise ValueError("empty ladder")
    runs = sorted((r for r in rems if r.state in ACTED_STATES), key=_order)
    on_ladder = set(ladder)
    for rem in runs:
        esc = _escalation(rem)
        if esc:
            on_ladder.add(rem.playbook)
            recorded = esc.get("ladder")
            if isinstance(recorded, list):
                on_ladder.update(str(p) for p in recorded)
    gate_failed = {source for (source, reason) in _escalations(rems) if reason == "gate_failed"}
    as_run: dict[str, int] = {}
    edited: dict[str, int] = {}
    previous: dict[str, tuple[RemediationLike, int]] = {}
    at_last_as_run: set[str] = set()
    at_last_edited: set[str] = set()
    moved = 0
    for rem in runs:
        subject = subject_of(rem)
        as_run[rem.playbook] = as_run.get(rem.playbook, 0) + 1
        if rem.playbook == ladder[-1]:
            at_last_as_run.add(subject)
        playbook = rem.playbook
        if rem.playbook in on_ladder:
            rung = ladder.index(rem.playbook) + 1 if rem.playbook in ladder else 1
            if (prev := previous.get(subject)) is not None:
                prev_rem, prev_rung = prev
                back = returned_at(prev_rem)
                created = rem.created_at
                if prev_rem.id in gate_failed or (back is not None and back < created <= back + window):
                    rung = min(prev_rung + 1, len(ladder))
            previous[subject] = (rem, rung)
            playbook = ladder[rung - 1]
            if rung == len(ladder):
                at_last_edited.add(subject)
        edited[playbook] = edited.get(playbook, 0) + 1
        moved += playbook != rem.playbook
    order = [*ladder, *sorted((set(as_run) | set(edited)) - set(ladder))]
    rows = [LadderRow(p, as_run.get(p, 0), edited.get(p, 0)) for p in order]
    return LadderComparison(
        ladder=ladder, window=window, rows=rows, runs=len(runs), moved=moved,
        subjects=len({subject_of(r) for r in runs}), last_rung_as_run=len(at_last_as_run),
        last_rung_edited=len(at_last_edited),
    )


# -- text -------------------------------------------------------------------------------------------------


def _num(value: float | None, suffix: str = "") -> str:
    return "-" if value is None else f"{value:g}{suffix}"


def _secs(value: float | None) -> str:
    return "-" if value is None else format_duration(timedelta(seconds=round(value)))


def _table(title: str, groups: Sequence[OutcomeCounts]) -> list[str]:
    head = f"{title:<28} {'runs':>5} {'healed':>6} {'recur':>6} {'escal':>6} {'failed':>6} {'open':>5} " \
           f"{'healed%':>8} {'recur%':>7} {'mttr p50':>9} {'mttr p90':>9}"
    lines = [head]
    for c in groups:
        lines.append(
            f"{c.key[:28]:<28} {c.runs:>5} {c.healed:>6} {c.recurred:>6} {c.escalated:>6} {c.failed:>6} {c.open:>5} "
            f"{_num(c.healed_pct, '%'):>8} {_num(c.recurrence_pct, '%'):>7} {_secs(c.mttr_p50_seconds):>9} "
            f"{_secs(c.mttr_p90_seconds):>9}"
        )
    return lines


def render_text(report: EffectivenessReport) -> str:
    """The report as plain-text tables (the CLI's `-o table`)."""
    since = report.since.isoformat() if report.since else "the beginning"
    t = report.totals
    lines = [
        f"effectiveness of {t.runs} remediation(s) created since {since}, recurrence window "
        f"{window_label(report.window)}",
        f"healed {t.healed}, recurred {t.recurred}, escalated {t.escalated}, failed {t.failed}, open {t.open}; "
        f"healed {_num(t.healed_pct, '%')} and recurred {_num(t.recurrence_pct, '%')} of {t.decided} decided; "
        f"MTTR p50 {_secs(t.mttr_p50_seconds)}, p90 {_secs(t.mttr_p90_seconds)}",
        "",
        *_table("playbook", report.by_playbook),
        "",
        *_table("xid", report.by_xid),
        "",
        *_table("gpu model", report.by_model),
        "",
        f"recurrences: {len(report.recurrences)}",
    ]
    for r in report.recurrences:
        lines.append(f"  {r.remediation_id} {r.subject} {r.playbook} xid={r.xid}: again after {_secs(r.seconds)} "
                     f"({r.recurred_by})")
    lines.append(f"on rung 2 now: {len(report.rung_2)}; on rung 3 or above now: {len(report.rung_3_plus)}")
    for s in [*report.rung_3_plus, *report.rung_2]:
        lines.append(f"  rung {s.rung}: {s.subject} {s.playbook} ({s.remediation_id}, {s.state})")
    return "\n".join(lines)


def render_ladder_text(cmp: LadderComparison) -> str:
    """As run vs under the edited ladder, one line per playbook."""
    lines = [
        f"ladder {' -> '.join(cmp.ladder)} (window {window_label(cmp.window)}): {cmp.runs} run(s) on "
        f"{cmp.subjects} subject(s), {cmp.moved} would run another playbook",
        f"{'playbook':<28} {'as run':>7} {'edited':>7} {'change':>7}",
    ]
    for r in cmp.rows:
        lines.append(f"{r.playbook[:28]:<28} {r.as_run:>7} {r.edited:>7} {r.edited - r.as_run:>+7}")
    lines.append(
        f"subjects reaching the last rung ({cmp.ladder[-1]}): {cmp.last_rung_as_run} as run, "
        f"{cmp.last_rung_edited} with the edited ladder"
    )
    return "\n".join(lines)

"""The idle-GPU report: per namespace, the GPUs reclaimed from idle workloads and the GPU-hours saved.

Computed from the audit log alone, so it can be recomputed at any time, agrees with what the controller
did, and survives restarts. The facts it reads are the step results the executor audits:

- `step.succeeded` of a forward `scale_workload` step: each workload it scaled down (`scaled`), with the
  GPU resources that freed (`freed`) — a reclaim starts at the event's time;
- `step.succeeded` of a revert `restore_workload` step: the remediation's reclaims end at that time;
- `step.succeeded` of a forward `reclaim_quota` / revert `restore_quota` step: quota lowered and returned.

GPU-hours saved are the whole GPUs freed times the hours they stayed freed within the report window
[`since`, `until`] (a reclaim still in force counts up to `until`); MIG slices are reported per profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from remediator.domain.json_values import JsonObject, JsonValue
from remediator.domain.timestamps import as_utc
from remediator.engine.effectiveness import (
    DEFAULT_WINDOW,
    EffectivenessReport,
    LadderComparison,
    RemediationFacts,
    compute_effectiveness,
    facts_of,
    replay_ladder,
)
from remediator.errors import ConfigError
from remediator.store.db import make_engine, make_sessionmaker, missing_database
from remediator.store.repository import Repository

__all__ = [
    "IdleReport",
    "NamespaceIdle",
    "compute_idle_report",
    "effectiveness_from_database",
    "effectiveness_report",
    "idle_report",
    "ladder_from_database",
    "ladder_replay",
    "read_remediation_facts",
]

GPU_RESOURCE = "nvidia.com/gpu"
PAGE = 1000


class AuditLike(Protocol):
    """What the report reads of an audit event."""

    @property
    def ts(self) -> datetime: ...

    @property
    def kind(self) -> str: ...

    @property
    def remediation_id(self) -> str | None: ...

    @property
    def data(self) -> Mapping[str, JsonValue]: ...


@dataclass
class _Reclaim:
    remediation_id: str
    namespace: str
    workload: str
    freed: dict[str, int]
    start: datetime
    end: datetime | None = None


@dataclass
class NamespaceIdle:
    """One namespace's line of the report."""

    namespace: str
    gpus_reclaimed: int = 0
    gpus_reclaimed_now: int = 0
    gpu_hours_saved: float = 0.0
    mig_reclaimed: dict[str, int] = field(default_factory=dict)
    mig_hours_saved: dict[str, float] = field(default_factory=dict)
    quota_lowered_now: dict[str, int] = field(default_factory=dict)
    remediations: set[str] = field(default_factory=set)
    workloads: set[str] = field(default_factory=set)

    def as_dict(self) -> JsonObject:
        return {
            "namespace": self.namespace,
            "gpus_reclaimed": self.gpus_reclaimed,
            "gpus_reclaimed_now": self.gpus_reclaimed_now,
            "gpu_hours_saved": round(self.gpu_hours_saved, 6),
            "mig_reclaimed": {k: v for k, v in sorted(self.mig_reclaimed.items())},
            "mig_hours_saved": {k: round(v, 6) for k, v in sorted(self.mig_hours_saved.items())},
            "quota_lowered_now": {k: v for k, v in sorted(self.quota_lowered_now.items())},
            "remediations": len(self.remediations),
            "workloads": [*sorted(self.workloads)],
        }


@dataclass
class IdleReport:
    generated_at: datetime
    since: datetime | None
    until: datetime
    namespaces: list[NamespaceIdle]

    @property
    def total_gpus_reclaimed(self) -> int:
        return sum(n.gpus_reclaimed for n in self.namespaces)

    @property
    def total_gpu_hours_saved(self) -> float:
        return sum(n.gpu_hours_saved for n in self.namespaces)

    def as_dict(self) -> JsonObject:
        return {
            "generated_at": self.generated_at.isoformat(),
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat(),
            "totals": {
                "gpus_reclaimed": self.total_gpus_reclaimed,
                "gpus_reclaimed_now": sum(n.gpus_reclaimed_now for n in self.namespaces),
                "gpu_hours_saved": round(self.total_gpu_hours_saved, 6),
            },
            "namespaces": [n.as_dict() for n in self.namespaces],
        }


def _hours(start: datetime, end: datetime, since: datetime | None, until: datetime) -> float:
    lo = max(start, since) if since else start
    hi = min(end, until)
    return max(0.0, (hi - lo).total_seconds() / 3600)


def _step(event: AuditLike, action: str, phase: str) -> Mapping[str, JsonValue] | None:
    data = event.data or {}
    if event.kind != "step.succeeded" or data.get("action") != action or data.get("phase") != phase:
        return None
    output = data.get("output")
    return output if isinstance(output, Mapping) else None


def _ints(value: object) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, int] = {}
    for key, amount in value.items():
        try:
            out[str(key)] = int(amount)
        except (TypeError, ValueError):
            continue
    return out


def compute_idle_report(
    events: Iterable[AuditLike], *, now: datetime, since: datetime | None = None, until: datetime | None = None
) -> IdleReport:
    """The report over `events` (oldest first), for the window [since, until or now]."""
    end_of_window = as_utc(until or now)
    start_of_window = as_utc(since) if since else None
    reclaims: list[_Reclaim] = []
    quota: dict[tuple[str, str], dict[str, int]] = {}
    for event in events:
        ts, rem_id = event.ts, event.remediation_id or ""
        if ts > end_of_window:
            break
        if (out := _step(event, "scale_workload", "forward")) is not None:
            workloads = out.get("workloads")
            for w in workloads if isinstance(workloads, list) else []:
                if isinstance(w, Mapping) and w.get("scaled") and _ints(w.get("freed")):
                    name = f"{w.get('kind')}/{w.get('name')}"
                    reclaims.append(_Reclaim(rem_id, str(w.get("namespace")), name, _ints(w.get("freed")), ts))
        elif _step(event, "restore_workload", "revert") is not None:
            for reclaim in reclaims:
                if reclaim.remediation_id == rem_id and reclaim.end is None:
                    reclaim.end = ts
        elif (out := _step(event, "reclaim_quota", "forward")) is not None:
            quota[(rem_id, str(out.get("namespace")))] = _ints(out.get("lowered"))
        elif _step(event, "restore_quota", "revert") is not None:
            for key in [k for k in quota if k[0] == rem_id]:
                del quota[key]
    lines: dict[str, NamespaceIdle] = {}
    for reclaim in reclaims:
        line = lines.setdefault(reclaim.namespace, NamespaceIdle(reclaim.namespace))
        end = reclaim.end or end_of_window
        hours = _hours(reclaim.start, end, start_of_window, end_of_window)
        if start_of_window is not None and end <= start_of_window:
            continue
        line.remediations.add(reclaim.remediation_id)
        line.workloads.add(reclaim.workload)
        still = reclaim.end is None
        for resource, amount in reclaim.freed.items():
            if resource == GPU_RESOURCE:
                line.gpus_reclaimed += amount
                line.gpus_reclaimed_now += amount if still else 0
                line.gpu_hours_saved += amount * hours
            else:
                line.mig_reclaimed[resource] = line.mig_reclaimed.get(resource, 0) + amount
                line.mig_hours_saved[resource] = line.mig_hours_saved.get(resource, 0.0) + amount * hours
    for (_rem, namespace), lowered in quota.items():
        line = lines.setdefault(namespace, NamespaceIdle(namespace))
        for resource, amount in lowered.items():
            line.quota_lowered_now[resource] = line.quota_lowered_now.get(resource, 0) + amount
    ordered = sorted(lines.values(), key=lambda n: (-n.gpu_hours_saved, n.namespace))
    return IdleReport(generated_at=as_utc(now), since=start_of_window, until=end_of_window, namespaces=ordered)


async def idle_report(
    repo: Repository, *, now: datetime | None = None, since: datetime | None = None, until: datetime | None = None
) -> IdleReport:
    """Read the whole audit log (in pages, oldest first) and compute the report."""
    events: list[AuditLike] = []
    after = 0
    while True:
        page = await repo.list_audit(after_id=after, limit=PAGE)
        events.extend(e for e in page if e.kind.startswith("step.succeeded"))
        if len(page) < PAGE:
            break
        after = page[-1].id
    return compute_idle_report(events, now=now or datetime.now(UTC), since=since, until=until)


# -- the effectiveness report (remediator.engine.effectiveness) over the store -----------------------------


async def read_remediation_facts(repo: Repository, since: datetime | None) -> list[RemediationFacts]:
    """Every remediation created since `since`, read in pages of PAGE rows and cut down to what reports use."""
    out: list[RemediationFacts] = []
    after: tuple[datetime, str] | None = None
    while True:
        page = await repo.remediations_since(since, after=after, limit=PAGE)
        out.extend(facts_of(rem) for rem in page)
        if len(page) < PAGE:
            return out
        after = (page[-1].created_at, page[-1].id)


async def effectiveness_report(
    repo: Repository, *, since: datetime | None, window: timedelta = DEFAULT_WINDOW, now: datetime | None = None
) -> EffectivenessReport:
    """What the remediations created since `since` achieved, judged with recurrence window `window`."""
    facts = await read_remediation_facts(repo, since)
    return compute_effectiveness(facts, now=now or repo.clock(), window=window, since=since)


async def ladder_replay(
    repo: Repository, ladder: Sequence[str], *, since: datetime | None, window: timedelta = DEFAULT_WINDOW
) -> LadderComparison:
    """The runs since `since` re-played under `ladder` (see `effectiveness.replay_ladder`)."""
    return replay_ladder(await read_remediation_facts(repo, since), ladder, window=window)


def _require_database(database_url: str) -> None:
    missing = missing_database(database_url)
    if missing is not None:
        raise ConfigError(f"no database at {missing} (REMEDIATOR_DATABASE_URL)")


async def _facts_from_database(database_url: str, since: datetime | None) -> list[RemediationFacts]:
    _require_database(database_url)
    engine = make_engine(database_url)
    try:
        return await read_remediation_facts(Repository(make_sessionmaker(engine)), since)
    finally:
        await engine.dispose()


async def effectiveness_from_database(
    database_url: str,
    *,
    since: datetime | None,
    window: timedelta = DEFAULT_WINDOW,
    ladder: Sequence[str] | None = None,
) -> tuple[EffectivenessReport, LadderComparison | None]:
    """The report (and, with `ladder`, the ladder comparison) over a database, read only.

    A missing SQLite file is a ConfigError, never created.
    """
    facts = await _facts_from_database(database_url, since)
    report = compute_effectiveness(facts, now=datetime.now(UTC), window=window, since=since)
    return report, replay_ladder(facts, ladder, window=window) if ladder else None


async def ladder_from_database(
    database_url: str, ladder: Sequence[str], *, since: datetime | None, window: timedelta = DEFAULT_WINDOW
) -> LadderComparison:
    """`ladder_replay` over a database, read only (a missing SQLite file is a ConfigError)."""
    return replay_ladder(await _facts_from_database(database_url, since), ladder, window=window)

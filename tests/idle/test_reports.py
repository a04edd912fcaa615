"""The idle report computed from a known audit history: GPUs reclaimed, still reclaimed, GPU-hours saved."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.api.app import create_app
from remediator.engine.bootstrap import build_runtime
from remediator.engine.idle_report import compute_idle_report
from remediator.engine.runtime import Runtime
from remediator.settings import Settings

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
TOKEN = "report-token"


@dataclass
class Event:
    ts: datetime
    kind: str
    remediation_id: str | None
    data: dict[str, Any] = field(default_factory=dict)


def scaled(rem: str, at: timedelta, namespace: str, name: str, freed: dict[str, int]) -> Event:
    workload = {"kind": "Deployment", "namespace": namespace, "name": name, "scaled": True, "freed": freed}
    output = {"changed": True, "workloads": [workload], "freed": freed}
    data = {"phase": "forward", "action": "scale_workload", "step": "scale", "output": output}
    return Event(T0 + at, "step.succeeded", rem, data)


def restored(rem: str, at: timedelta) -> Event:
    data = {"phase": "revert", "action": "restore_workload", "step": "revert:scale", "output": {}}
    return Event(T0 + at, "step.succeeded", rem, data)


def quota(rem: str, at: timedelta, namespace: str, lowered: dict[str, int], *, revert: bool = False) -> Event:
    action, phase = ("restore_quota", "revert") if revert else ("reclaim_quota", "forward")
    output = {"namespace": namespace, "lowered": lowered}
    return Event(T0 + at, "step.succeeded", rem, {"phase": phase, "action": action, "output": output})


HOURS = timedelta(hours=1)
HISTORY = [
    scaled("r1", 0 * HOURS, "research", "notebook", {"nvidia.com/gpu": 4}),
    quota("r1", 0 * HOURS, "research", {"nvidia.com/gpu": 4}),
    scaled("r2", 1 * HOURS, "vision", "labeler", {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 3}),
    Event(T0 + 1 * HOURS, "step.failed", "r3", {"phase": "forward", "action": "scale_workload"}),
    restored("r1", 3 * HOURS),
    quota("r1", 3 * HOURS, "research", {}, revert=True),
    scaled("r4", 4 * HOURS, "research", "sweep", {"nvidia.com/gpu": 1}),
]


def test_figures_from_a_known_history() -> None:
    report = compute_idle_report(HISTORY, now=T0 + 5 * HOURS)
    lines = {n.namespace: n.as_dict() for n in report.namespaces}

    assert lines["research"]["gpus_reclaimed"] == 5  # 4 (r1, returned after 3 h) + 1 (r4, still)
    assert lines["research"]["gpus_reclaimed_now"] == 1
    assert lines["research"]["gpu_hours_saved"] == pytest.approx(4 * 3 + 1 * 1)
    assert lines["research"]["quota_lowered_now"] == {}
    assert lines["research"]["workloads"] == ["Deployment/notebook", "Deployment/sweep"]
    assert lines["research"]["remediations"] == 2

    assert lines["vision"]["gpus_reclaimed"] == 2 and lines["vision"]["gpus_reclaimed_now"] == 2
    assert lines["vision"]["gpu_hours_saved"] == pytest.approx(2 * 4)
    assert lines["vision"]["mig_reclaimed"] == {"nvidia.com/mig-1g.10gb": 3}
    assert lines["vision"]["mig_hours_saved"] == {"nvidia.com/mig-1g.10gb": pytest.approx(12)}
    assert report.as_dict()["totals"] == {"gpus_reclaimed": 7, "gpus_reclaimed_now": 3, "gpu_hours_saved": 21.0}


def test_window_bounds_the_hours() -> None:
    report = compute_idle_report(HISTORY, now=T0 + 10 * HOURS, since=T0 + 2 * HOURS, until=T0 + 4 * HOURS)
    lines = {n.namespace: n for n in report.namespaces}
    assert lines["research"].gpu_hours_saved == pytest.approx(4 * 1)  # r1 from 2 h to 3 h; r4 not yet
    assert lines["vision"].gpu_hours_saved == pytest.approx(2 * 2)
    assert lines["research"].quota_lowered_now == {}
    early = compute_idle_report(HISTORY, now=T0 + 10 * HOURS, until=T0 + 2 * HOURS)
    assert {n.namespace: n.quota_lowered_now for n in early.namespaces}["research"] == {"nvidia.com/gpu": 4}


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Runtime, httpx.AsyncClient, Clock]]:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", webhook_token=[TOKEN], secret_key="k", dry_run=True
    )
    rt, engine = await build_runtime(settings, connect_kube=False)
    clock = Clock(T0)
    rt.repo.clock = clock
    app = create_app(settings, runtime=rt, run_worker=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        yield rt, client, clock
    await engine.dispose()


async def test_api_and_page_read_the_audit_log(served: tuple[Runtime, httpx.AsyncClient, Clock]) -> None:
    rt, client, clock = served
    for event in HISTORY:
        clock.now = event.ts
        await rt.repo.record_audit(event.kind, remediation_id=event.remediation_id, data=event.data)
    clock.now = T0 + 5 * HOURS
    auth = {"Authorization": f"Bearer {TOKEN}"}

    assert (await client.get("/api/v1/reports/idle")).status_code == 401
    body = (await client.get("/api/v1/reports/idle", headers=auth)).json()
    assert body["totals"] == {"gpus_reclaimed": 7, "gpus_reclaimed_now": 3, "gpu_hours_saved": 21.0}
    assert [n["namespace"] for n in body["namespaces"]] == ["research", "vision"]

    windowed = await client.get(
        "/api/v1/reports/idle", params={"since": "2026-03-02T10:00:00Z", "until": "2026-03-02T12:00:00Z"}, headers=auth
    )
    assert windowed.json()["totals"]["gpu_hours_saved"] == pytest.approx(8.0)
    bad = await client.get("/api/v1/reports/idle", params={"since": "yesterday"}, headers=auth)
    assert bad.status_code == 422

    page = await client.get("/reports/idle")
    assert page.status_code == 200
    assert 'data-namespace="research"' in page.text and "13.00" in page.text
    assert 'id="total-hours">21.00' in page.text

"""The list pages' lean read: the same rows and order as `list_remediations`, the plan's Xid read in SQL.

Run on SQLite and on PostgreSQL, whose JSON operators differ (`json_extract` against `->`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from remediator.store.db import make_engine, make_sessionmaker, upgrade
from remediator.store.models import Remediation
from remediator.store.repository import Repository

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
XID_79 = {"code": 79, "description": "GPU has fallen off the bus", "resolution": "RESET_GPU"}


async def repository(url: str) -> AsyncIterator[Repository]:
    await upgrade(url)
    engine = make_engine(url)
    yield Repository(make_sessionmaker(engine))
    await engine.dispose()


@pytest.fixture
async def sqlite_repo(tmp_path: Path) -> AsyncIterator[Repository]:
    async for repo in repository(f"sqlite+aiosqlite:///{tmp_path / 'summaries.db'}"):
        yield repo


@pytest.fixture
async def postgresql_repo(pg_url: str) -> AsyncIterator[Repository]:
    async for repo in repository(pg_url):
        yield repo


@pytest.fixture(params=["sqlite_repo", "postgresql_repo"])
def repo(request: pytest.FixtureRequest) -> Repository:
    found: Repository = request.getfixturevalue(request.param)
    return found


def row(n: int, state: str, node: str, plan: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    created = T0 + timedelta(minutes=n)
    return {
        "id": f"00000000-0000-4000-8000-{n:012d}", "created_at": created, "updated_at": created,
        "finished_at": None, "state": state, "state_reason": f"reason {n}", "rule": "xid-79",
        "playbook": "gpu-reset", "definitions_version": "v1", "target_kind": "gpu", "target_key": f"{node}/gpu0",
        "node": node, "gpu_uuid": f"GPU-{n}", "gpu_index": "0", "namespace": None, "pod": None, "alert_id": None,
        "alert_fingerprint": f"{n:016x}", "alertname": "GPUXidError", "alert_labels": labels,
        "alert_annotations": {"summary": "x" * 500}, "params": {"gpu": "0"}, "plan": plan,
        "context": {"pods": [{"name": f"p{k}"} for k in range(20)]},
    }


async def fill(repo: Repository) -> None:
    rows = [
        row(1, "failed", "gpu-a", {"xid": XID_79, "steps": [{"name": "drain"}]}, {"severity": "critical"}),
        row(2, "succeeded", "gpu-a", {"steps": []}, {"xid": "48"}),  # no Xid in the plan: the label's
        row(3, "failed", "gpu-b", {"xid": None}, {}),
        row(4, "held", "gpu-b", {"xid": {"code": 13}}, {"severity": "warning"}),
    ]
    async with repo.transaction() as session:
        await session.execute(insert(Remediation), rows)


async def test_summaries_match_the_full_list_newest_first_with_the_filters(repo: Repository) -> None:
    await fill(repo)
    for state, node in ((None, None), ("failed", None), (None, "gpu-b"), ("failed", "gpu-a"), ("pending", None)):
        lines = await repo.remediation_summaries(state=state, node=node)
        full = await repo.list_remediations(state=state, node=node, limit=200)
        assert [s.id for s in lines] == [r.id for r in full], (state, node)
        for s, r in zip(lines, full, strict=True):
            assert (s.state, s.state_reason, s.playbook, s.node, s.target_key, s.alertname, s.alert_labels) == (
                r.state, r.state_reason, r.playbook, r.node, r.target_key, r.alertname, r.alert_labels)
            assert s.created_at == r.created_at
    assert [s.id[-1] for s in await repo.remediation_summaries(limit=2)] == ["4", "3"]


async def test_the_plans_xid_is_read_without_the_plan(repo: Repository) -> None:
    await fill(repo)
    xids = {s.id[-1]: s.plan_xid for s in await repo.remediation_summaries()}
    assert xids == {"1": XID_79, "2": None, "3": None, "4": {"code": 13}}


async def test_held_lists_only_held_remediations(repo: Repository) -> None:
    await fill(repo)
    held = await repo.held()
    assert [(h.id[-1], h.node, h.playbook, h.state_reason) for h in held] == [("4", "gpu-b", "gpu-reset", "reason 4")]

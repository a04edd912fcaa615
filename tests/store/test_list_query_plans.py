"""The list reads (remediations by state/node, one remediation's audit, recent quarantine starts) use indexes.

Each test captures the SQL the repository really sends and asks SQLite's planner about it: a page of the
list must come out of a composite index in created_at order, not from sorting every matching row.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from remediator.store.db import make_engine, make_sessionmaker, upgrade
from remediator.store.repository import LARGE_COLUMNS, Repository


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[tuple[AsyncEngine, Repository]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'plans.db'}"
    await upgrade(url)
    engine = make_engine(url)
    yield engine, Repository(make_sessionmaker(engine))
    await engine.dispose()


async def plan_of(engine: AsyncEngine, table: str, call: Callable[[], Awaitable[Any]]) -> str:
    """EXPLAIN QUERY PLAN of the one SELECT on `table` that `call` sends, as one line."""
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and f"FROM {table}" in statement:
            sent.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", capture)
    try:
        await call()
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", capture)
    assert len(sent) == 1, sent
    statement, parameters = sent[0]
    async with engine.connect() as conn:
        rows = (await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)).all()
    return " | ".join(str(r[-1]) for r in rows)


async def test_list_by_state_pages_out_of_the_state_index(store: tuple[AsyncEngine, Repository]) -> None:
    engine, repo = store
    plan = await plan_of(engine, "remediations", lambda: repo.list_remediations(state="failed", limit=100))
    assert "USING INDEX ix_remediations_state_created (state=?)" in plan
    assert "USE TEMP B-TREE FOR ORDER BY" not in plan  # at most the tie-breaker on id is sorted


async def test_list_by_node_and_state_uses_both_in_the_index(store: tuple[AsyncEngine, Repository]) -> None:
    engine, repo = store
    plan = await plan_of(
        engine, "remediations", lambda: repo.list_remediations(state="succeeded", node="gpu-1", limit=100)
    )
    assert "USING INDEX ix_remediations_node_state_created (node=? AND state=?)" in plan
    assert "USE TEMP B-TREE FOR ORDER BY" not in plan


async def test_list_by_node_uses_the_node_index(store: tuple[AsyncEngine, Repository]) -> None:
    engine, repo = store
    plan = await plan_of(engine, "remediations", lambda: repo.list_remediations(node="gpu-1", limit=100))
    assert "USING INDEX ix_remediations_node_state_created (node=?)" in plan


async def test_audit_of_one_remediation_uses_its_index(store: tuple[AsyncEngine, Repository]) -> None:
    engine, repo = store
    plan = await plan_of(engine, "audit_events", lambda: repo.list_audit(remediation_id="r-1"))
    assert "INDEX ix_audit_events_remediation_id (remediation_id=? AND rowid>?)" in plan
    assert "TEMP B-TREE" not in plan


async def test_recent_quarantine_starts_are_counted_from_the_index(store: tuple[AsyncEngine, Repository]) -> None:
    engine, repo = store

    async def count() -> int:
        async with repo.transaction() as session:
            return await repo.recent_quarantine_starts(session, datetime(2026, 12, 1, tzinfo=UTC))

    plan = await plan_of(engine, "audit_events", count)
    assert "USING COVERING INDEX ix_audit_events_kind_ts (kind=? AND ts>?)" in plan


async def test_summary_rows_leave_the_large_columns_out(store: tuple[AsyncEngine, Repository]) -> None:
    engine, repo = store
    plan = await plan_of(engine, "remediations", lambda: repo.list_remediations(leave_out=LARGE_COLUMNS))
    assert "USING INDEX ix_remediations_created_at" in plan
    sent: list[str] = []
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    await repo.list_remediations(leave_out=LARGE_COLUMNS)
    select_list = sent[-1].split(" FROM ")[0]
    assert "remediations.state" in select_list
    assert "remediations.plan" not in select_list and "remediations.context" not in select_list


async def test_quarantined_nodes_come_from_the_index(store: tuple[AsyncEngine, Repository]) -> None:
    engine, repo = store

    async def nodes() -> set[str]:
        async with repo.transaction() as session:
            return await repo.quarantined_nodes(session)

    plan = await plan_of(engine, "remediations", nodes)
    assert "USING COVERING INDEX ix_remediations_quarantined_node (quarantined=?" in plan


async def test_list_page_lines_page_out_of_the_index_and_read_only_the_plans_xid(
    store: tuple[AsyncEngine, Repository],
) -> None:
    engine, repo = store
    plan = await plan_of(engine, "remediations", lambda: repo.remediation_summaries(state="failed"))
    assert "USING INDEX ix_remediations_state_created (state=?)" in plan
    assert "USE TEMP B-TREE FOR ORDER BY" not in plan
    plan = await plan_of(engine, "remediations", lambda: repo.remediation_summaries(node="gpu-1", state="failed"))
    assert "USING INDEX ix_remediations_node_state_created (node=? AND state=?)" in plan
    sent: list[str] = []
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
    await repo.remediation_summaries()
    select_list = sent[-1].split("FROM remediations")[0].strip()
    assert "remediations.alert_labels" in select_list
    columns = [c.strip() for c in select_list.removeprefix("SELECT ").split(",")]
    assert [c for c in columns if "plan" in c] == ['JSON_QUOTE(JSON_EXTRACT(remediations."plan"', '?)) AS plan_xid']
    assert not any(c in select_list for c in ("remediations.context", "remediations.params",
                                               "remediations.alert_annotations"))

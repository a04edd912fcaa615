"""The audit hash chain: intact chains verify; edits, deletions and reorderings are named."""

from __future__ import annotations

from sqlalchemy import delete, select, update

from remediator.store.audit import verify_chain
from remediator.store.models import AuditEvent
from remediator.store.repository import Repository


async def _fill(repo: Repository, n: int = 5) -> list[AuditEvent]:
    for i in range(n):
        async with repo.transaction() as session:
            await repo.audit(session, "test.event", data={"i": i, "text": "ünïcode"})
    async with repo.transaction() as session:
        return list((await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all())


async def test_intact_chain_verifies(repo: Repository) -> None:
    events = await _fill(repo)
    assert verify_chain(events) is None


async def test_edit_is_detected_and_named(repo: Repository) -> None:
    events = await _fill(repo)
    async with repo.transaction() as session:
        await session.execute(update(AuditEvent).where(AuditEvent.id == events[2].id).values(data={"i": 99}))
    async with repo.transaction() as session:
        rows = list((await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all())
    problem = verify_chain(rows)
    assert problem is not None and problem.event_id == events[2].id and "edited" in problem.reason


async def test_delete_is_detected(repo: Repository) -> None:
    events = await _fill(repo)
    async with repo.transaction() as session:
        await session.execute(delete(AuditEvent).where(AuditEvent.id == events[1].id))
    async with repo.transaction() as session:
        rows = list((await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all())
    problem = verify_chain(rows)
    assert problem is not None and problem.event_id == events[2].id


async def test_reorder_is_detected(repo: Repository) -> None:
    events = await _fill(repo)
    a, b = events[1], events[3]
    cols = ("ts", "kind", "actor", "data", "prev_hash", "hash")
    async with repo.transaction() as session:
        await session.execute(update(AuditEvent).where(AuditEvent.id == a.id).values(hash="x" * 64))
        a_values = {c: getattr(a, c) for c in cols}
        b_values = {c: getattr(b, c) for c in cols}
        await session.execute(update(AuditEvent).where(AuditEvent.id == b.id).values(**a_values))
        await session.execute(update(AuditEvent).where(AuditEvent.id == a.id).values(**b_values))
    async with repo.transaction() as session:
        rows = list((await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all())
    problem = verify_chain(rows)
    assert problem is not None and problem.event_id == a.id

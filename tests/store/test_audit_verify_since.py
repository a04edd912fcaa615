"""The controller's periodic audit check: from the last checked event to the head, catching rewrites of both."""

from __future__ import annotations

from sqlalchemy import select, update

from remediator.store.audit import event_hash
from remediator.store.audit_checkpoint import verify_since
from remediator.store.models import AuditEvent
from remediator.store.repository import Repository

KEY = b"k" * 32


async def _write(repo: Repository, n: int) -> None:
    for i in range(n):
        async with repo.transaction() as session:
            await repo.audit(session, "test.event", data={"i": i})


async def _check(repo: Repository, since: tuple[int, str] | None) -> tuple[tuple[int, str] | None, str | None, int]:
    async with repo.transaction() as session:
        report = await verify_since(session, KEY, since)
    return report.head, report.problem.reason if report.problem else None, report.events


async def test_a_check_reads_only_what_was_appended_since_the_last(repo: Repository) -> None:
    repo.audit_key = KEY
    await _write(repo, 4)
    head, problem, events = await _check(repo, None)
    assert (problem, events) == (None, 4) and head is not None
    await _write(repo, 3)
    newer, problem, events = await _check(repo, head)
    assert (problem, events) == (None, 3)
    assert newer is not None and newer[0] > head[0]
    assert await _check(repo, newer) == (None, None, 0)


async def test_a_rewritten_checked_event_fails(repo: Repository) -> None:
    repo.audit_key = KEY
    await _write(repo, 3)
    head, _, _ = await _check(repo, None)
    assert head is not None
    async with repo.transaction() as session:
        await session.execute(update(AuditEvent).where(AuditEvent.id == head[0]).values(hash="0" * 64))
    _, problem, _ = await _check(repo, head)
    assert problem is not None and "already checked" in problem


async def test_a_new_event_rehashed_without_the_key_fails(repo: Repository) -> None:
    repo.audit_key = KEY
    await _write(repo, 2)
    head, _, _ = await _check(repo, None)
    await _write(repo, 1)
    async with repo.transaction() as session:
        newest = (await session.scalars(select(AuditEvent).order_by(AuditEvent.id.desc()).limit(1))).one()
        plain = event_hash(ts=newest.ts, remediation_id=newest.remediation_id, kind=newest.kind,
                           actor=newest.actor, data=newest.data, prev_hash=newest.prev_hash)
        await session.execute(update(AuditEvent).where(AuditEvent.id == newest.id).values(hash=plain))
    _, problem, _ = await _check(repo, head)
    assert problem is not None and "no keyed hash" in problem


async def test_a_deleted_checked_event_fails(repo: Repository) -> None:
    repo.audit_key = KEY
    await _write(repo, 3)
    head, _, _ = await _check(repo, None)
    assert head is not None
    async with repo.transaction() as session:
        await session.delete(await session.get(AuditEvent, head[0]))
    _, problem, _ = await _check(repo, head)
    assert problem is not None

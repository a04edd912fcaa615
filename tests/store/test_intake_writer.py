"""Group commit of webhook batches: every submitter gets its own result, after its batch is committed."""

from __future__ import annotations

import asyncio

import pytest

from remediator.store.intake_writer import IntakeWriter
from remediator.store.repository import Repository
from tests.store.test_intake_store import payload


async def test_concurrent_batches_share_commits_and_each_gets_its_result(repo: Repository) -> None:
    writer = IntakeWriter(repo)
    try:
        batches = [payload(fingerprint=f"f{i}") for i in range(40)] + [payload(fingerprint="f3")]
        results = await asyncio.gather(*(writer.submit(b) for b in batches))
    finally:
        await writer.close()
    assert len({r.batch_id for r in results}) == 41
    assert sum(r.repeats for r in results) == 1 and results[-1].repeats == 1
    stored = await repo.list_alerts()
    assert len(stored) == 41 and sum(a.state == "repeat" for a in stored) == 1


async def test_a_store_failure_reaches_every_waiting_submitter(repo: Repository) -> None:
    from remediator.errors import StoreUnavailable
    from remediator.store.db import make_engine, make_sessionmaker

    broken_engine = make_engine("sqlite+aiosqlite:////nonexistent-dir/x.db")
    writer = IntakeWriter(Repository(make_sessionmaker(broken_engine)))
    try:
        outcomes = await asyncio.gather(*(writer.submit(payload(fingerprint=f"g{i}")) for i in range(5)),
                                        return_exceptions=True)
    finally:
        await writer.close()
        await broken_engine.dispose()
    assert all(isinstance(o, StoreUnavailable) for o in outcomes)


async def test_other_transactions_wait_while_intake_is_pending(repo: Repository) -> None:
    writer = IntakeWriter(repo)
    try:
        submit = asyncio.create_task(writer.submit(payload(fingerprint="h1")))
        await asyncio.sleep(0)
        assert not repo.intake_idle.is_set()
        await submit
        assert repo.intake_idle.is_set()
    finally:
        await writer.close()


async def test_a_sustained_flood_does_not_starve_other_transactions(
    repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Intake never idle (senders back to back): other work still gets its turn after the priority wait."""
    import remediator.store.transactions as transactions

    monkeypatch.setattr(transactions, "INTAKE_PRIORITY_WAIT_S", 0.05)
    writer = IntakeWriter(repo)
    flooding = True
    sent = 0

    async def sender(n: int) -> None:
        nonlocal sent
        while flooding:
            await writer.submit(payload(fingerprint=f"flood{n}x{sent}"))
            sent += 1

    senders = [asyncio.create_task(sender(n)) for n in range(4)]
    try:
        async with asyncio.timeout(10):
            while repo.intake_idle.is_set():
                assert not any(t.done() for t in senders)
                await asyncio.sleep(0)
            for _ in range(3):
                await repo.ping()
                assert not repo.intake_idle.is_set()  # still flooding: the pings went while intake was busy
    finally:
        flooding = False
        await asyncio.gather(*senders)
        await writer.close()
    assert sent > 0


async def test_a_burst_is_stored_before_the_next_transaction(repo: Repository) -> None:
    writer = IntakeWriter(repo)
    order: list[str] = []

    async def send(i: int) -> None:
        await writer.submit(payload(fingerprint=f"burst{i}"))
        order.append("batch")

    async def other() -> None:
        await repo.ping()
        order.append("other")

    try:
        burst = [asyncio.create_task(send(i)) for i in range(20)]
        await asyncio.sleep(0)
        await asyncio.gather(other(), *burst)
    finally:
        await writer.close()
    assert order == ["batch"] * 20 + ["other"]


async def test_start_times_with_an_offset_are_stored_as_utc(repo: Repository) -> None:
    from datetime import UTC, datetime

    from remediator.store.sqlite_intake import sqlite_time

    assert sqlite_time(None) is None
    await repo.store_batch(payload(fingerprint="tz1", starts="2026-12-02T12:00:00+02:00"))
    [alert] = await repo.list_alerts()
    stored = alert.starts_at if alert.starts_at.tzinfo else alert.starts_at.replace(tzinfo=UTC)
    assert stored == datetime(2026, 12, 2, 10, 0, tzinfo=UTC)

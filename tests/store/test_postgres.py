"""The same store on PostgreSQL: migrations apply, claims skip locked rows, the audit chain holds under
concurrent writers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from remediator.store.audit import verify_chain
from remediator.store.db import make_engine, make_sessionmaker, upgrade
from remediator.store.models import AuditEvent
from remediator.store.repository import Repository
from tests.store.test_intake_store import payload


@pytest.fixture
async def pg_repo(pg_url: str) -> AsyncIterator[Repository]:
    await upgrade(pg_url)
    engine = make_engine(pg_url)
    yield Repository(make_sessionmaker(engine))
    await engine.dispose()


async def test_concurrent_audit_writers_keep_one_chain(pg_repo: Repository) -> None:
    async def write(i: int) -> None:
        async with pg_repo.transaction() as session:
            await pg_repo.audit(session, "test.concurrent", data={"i": i})

    await asyncio.gather(*(write(i) for i in range(40)))
    async with pg_repo.transaction() as session:
        rows = list((await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all())
    assert len(rows) == 40
    assert verify_chain(rows) is None


async def test_two_workers_never_claim_the_same_alert(pg_repo: Repository) -> None:
    for i in range(30):
        await pg_repo.store_batch(payload(fingerprint=f"f{i}"))
    a, b = await asyncio.gather(
        pg_repo.claim_alerts("a", 20, timedelta(seconds=30)), pg_repo.claim_alerts("b", 20, timedelta(seconds=30))
    )
    ids_a, ids_b = {r.id for r in a}, {r.id for r in b}
    assert not ids_a & ids_b
    assert len(ids_a | ids_b) == 30


async def test_repeat_detection_on_postgres(pg_repo: Repository) -> None:
    assert (await pg_repo.store_batch(payload())).repeats == 0
    assert (await pg_repo.store_batch(payload())).repeats == 1

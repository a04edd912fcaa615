"""The silences table on SQLite and PostgreSQL: what is in force when, expiry kept and audited once, and
migration 0010 up and down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from remediator.domain.silences import SilenceMatcher
from remediator.store.db import MIGRATIONS_DIR, make_engine, make_sessionmaker, upgrade
from remediator.store.repository import Repository

T0 = datetime(2026, 12, 5, 12, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def repo(db_url: str) -> AsyncIterator[Repository]:
    await upgrade(db_url)
    engine = make_engine(db_url)
    repo = Repository(make_sessionmaker(engine))
    repo.clock = lambda: T0
    yield repo
    await engine.dispose()


async def test_in_force_between_start_and_end_and_expired_once(repo: Repository) -> None:
    hour = timedelta(hours=1)
    matchers = [
        SilenceMatcher("Hostname", "gpu-node-1[0-9]", is_regex=True), SilenceMatcher("xid", "13", is_equal=False)
    ]
    now_on = await repo.create_silence(matchers, starts_at=T0, ends_at=T0 + 2 * hour, created_by="Alice",
                                       comment="rack 4", actor="api")
    later = await repo.create_silence(matchers[:1], starts_at=T0 + hour, ends_at=T0 + 3 * hour, created_by="Bob",
                                      comment="later", actor="api")
    assert [s.id for s in await repo.active_silences(T0)] == [now_on.id]
    (active,) = await repo.active_silences(T0)
    assert active.matchers == tuple(matchers) and active.created_by == "Alice" and active.comment == "rack 4"
    assert [s.id for s in await repo.active_silences(T0 + hour)] == [now_on.id, later.id]
    assert [s.id for s in await repo.active_silences(T0 + 2 * hour)] == [later.id]  # the end is exclusive

    expired = await repo.expire_silence(later.id, actor="carol", comment="not needed")
    assert expired is not None and expired.expired_by == "carol"
    kept = await repo.get_silence(later.id)
    assert kept is not None and kept.ends_at.replace(tzinfo=UTC) == T0 and kept.starts_at.replace(tzinfo=UTC) == T0
    assert [s.id for s in await repo.active_silences(T0 + hour)] == [now_on.id]
    assert await repo.expire_silence(later.id, actor="dave") is not None  # already ended: unchanged
    assert await repo.expire_silence("nope", actor="dave") is None
    events = [(e.kind, e.actor) for e in await repo.list_audit()]
    assert events == [("silence.created", "api"), ("silence.created", "api"), ("silence.expired", "carol")]
    assert set(await repo.silences_by_id([now_on.id, later.id, "nope"])) == {now_on.id, later.id}
    assert [s.id for s in await repo.list_silences()] in ([later.id, now_on.id], [now_on.id, later.id])


async def test_migration_0010_up_and_down(db_url: str) -> None:
    await upgrade(db_url, "0010")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    engine = make_engine(db_url)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(lambda c: sa.inspect(c).has_table("silences"))
        await asyncio.to_thread(command.downgrade, config, "0009")
        async with engine.connect() as conn:
            assert not await conn.run_sync(lambda c: sa.inspect(c).has_table("silences"))
    finally:
        await engine.dispose()

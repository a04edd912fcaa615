"""Revoked UI sessions on SQLite and PostgreSQL: a revocation is seen by another process's store on the same
database, a second revocation of the same session is harmless, and rows past their cookie's expiry are pruned
by the next sign-out (the expiry then refuses the cookie on its own)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from remediator.store.db import make_engine, make_sessionmaker, upgrade
from remediator.store.models import RevokedSession
from remediator.store.repository import Repository


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


async def test_a_revoked_session_is_refused_by_every_store_on_the_database(db_url: str) -> None:
    await upgrade(db_url)
    now = datetime.now(UTC)
    engines = [make_engine(db_url), make_engine(db_url)]
    try:
        here, there = (Repository(make_sessionmaker(engine), clock=lambda: now) for engine in engines)
        assert not await there.session_revoked("s" * 22)
        await here.revoke_session("s" * 22, name="alice", expires_at=now + timedelta(hours=1), client="10.0.0.1")
        await here.revoke_session("s" * 22, name="alice", expires_at=now + timedelta(hours=1), client="10.0.0.1")
        assert await there.session_revoked("s" * 22) and not await there.session_revoked("t" * 22)
        signed_out = [e for e in await there.list_audit() if e.kind == "ui.signed_out"]
        assert [(e.actor, e.data) for e in signed_out] == [("alice", {"client": "10.0.0.1"})]

        await here.revoke_session("u" * 22, name="bob", expires_at=now + timedelta(seconds=1), client="10.0.0.2")
        now += timedelta(hours=2)  # both cookies have expired: the next sign-out prunes their rows
        await there.revoke_session("v" * 22, name="bob", expires_at=now + timedelta(hours=1), client="10.0.0.2")
        async with there.reading() as session:
            assert await session.scalar(select(func.count()).select_from(RevokedSession)) == 1
        assert await here.session_revoked("v" * 22)
    finally:
        for engine in engines:
            await engine.dispose()

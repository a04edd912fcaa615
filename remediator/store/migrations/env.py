"""Alembic environment: runs migrations on the async engine; on PostgreSQL under an advisory lock so
replicas starting together do not race."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from remediator.store.models import Base

_MIGRATION_LOCK = 7_313_001


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
        context.run_migrations()


async def _main() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url
    engine = create_async_engine(url)
    async with engine.connect() as connection:
        await connection.run_sync(_run)
        await connection.commit()
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `remediator db upgrade`")
asyncio.run(_main())

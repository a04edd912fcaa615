"""A fresh PostgreSQL database per test on the machine's server (127.0.0.1:5432, trust auth).

The server is part of the test environment (CI starts it), so a missing server is a failure, not a skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

PG_HOST = os.environ.get("PGHOST", "127.0.0.1")
PG_PORT = int(os.environ.get("PGPORT", "5432"))
PG_USER = os.environ.get("PGUSER", "postgres")
PG_ADMIN_DB = os.environ.get("PGDATABASE", "test")


async def _admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, database=PG_ADMIN_DB, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL at {PG_HOST}:{PG_PORT} (database {PG_ADMIN_DB}) is needed: {exc}")


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """`postgresql+asyncpg://...` of a database created for this test and dropped after it."""
    name = f"remediator_{uuid.uuid4().hex[:12]}"
    admin = await _admin()
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    admin = await _admin()
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()

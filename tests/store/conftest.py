"""A migrated SQLite store per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from remediator.store.db import make_engine, make_sessionmaker, upgrade
from remediator.store.repository import Repository


@pytest.fixture
async def repo(tmp_path: Path) -> AsyncIterator[Repository]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'store.db'}"
    await upgrade(url)
    engine = make_engine(url)
    yield Repository(make_sessionmaker(engine))
    await engine.dispose()

"""A task cancelled inside a statement (a worker stopping, a client hanging up) leaves the store writable.

Before the fix, SQLite kept the cancelled connection's transaction, and with it the database's write lock,
until the garbage collector freed the abandoned cursor: every later writer waited out the 30 s busy timeout
and failed with "database is locked".
"""

from __future__ import annotations

import asyncio

from sqlalchemy import TextClause, text

from remediator.store.repository import Repository

# A statement that runs long enough (~0.5-1 s) to be cancelled in the middle.
_SLOW = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT count(*) FROM c"


def _insert(key: str) -> TextClause:
    insert = "INSERT INTO controller_state (key, value, updated_at) VALUES (:key, '{}', CURRENT_TIMESTAMP)"
    return text(insert).bindparams(key=key)


async def _cancel_inside_statement(repo: Repository, cancels: int) -> None:
    started = asyncio.Event()

    async def writer() -> None:
        async with repo.transaction() as session:
            await session.execute(_insert("cancelled"))
            started.set()
            await session.execute(text(_SLOW))

    task = asyncio.create_task(writer())
    await started.wait()
    await asyncio.sleep(0.05)  # inside the slow statement
    for _ in range(cancels):
        task.cancel()
        await asyncio.sleep(0.02)
    await asyncio.wait([task])
    assert task.cancelled()


async def _next_write_commits(repo: Repository) -> list[str]:
    async with asyncio.timeout(10):  # the busy timeout is 30 s: a held lock fails this
        async with repo.transaction() as session:
            await session.execute(_insert("after"))
        async with repo.reading() as session:
            rows = await session.execute(text("SELECT key FROM controller_state ORDER BY key"))
            return [row[0] for row in rows.all()]


async def test_a_write_cancelled_mid_statement_is_rolled_back_and_releases_the_lock(repo: Repository) -> None:
    await _cancel_inside_statement(repo, cancels=1)
    assert await _next_write_commits(repo) == ["after"]  # the cancelled insert is gone, the next one landed


async def test_cancelled_again_while_cleaning_up(repo: Repository) -> None:
    await _cancel_inside_statement(repo, cancels=3)
    assert await _next_write_commits(repo) == ["after"]

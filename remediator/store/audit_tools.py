"""`remediator audit verify` and `remediator audit export`: read the chain straight from the database."""

from __future__ import annotations

import json
from typing import TextIO

from sqlalchemy import select

from remediator.store.audit import verify_chain
from remediator.store.db import make_engine, make_sessionmaker
from remediator.store.models import AuditEvent

__all__ = ["export", "verify"]


async def _events(url: str) -> list[AuditEvent]:
    engine = make_engine(url)
    try:
        async with make_sessionmaker(engine)() as session:
            return list((await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all())
    finally:
        await engine.dispose()


async def verify(url: str) -> tuple[bool, str]:
    events = await _events(url)
    problem = verify_chain(events)
    if problem is None:
        return True, f"ok: {len(events)} audit events, hash chain intact"
    return False, f"audit event {problem.event_id}: {problem.reason}"


async def export(url: str, out: TextIO) -> None:
    for e in await _events(url):
        out.write(json.dumps({
            "id": e.id, "ts": e.ts.isoformat(), "remediation_id": e.remediation_id, "kind": e.kind,
            "actor": e.actor, "data": e.data, "prev_hash": e.prev_hash, "hash": e.hash,
        }, sort_keys=True, default=str) + "\n")

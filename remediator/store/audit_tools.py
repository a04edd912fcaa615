"""`remediator audit verify | head | export` and `remediator db prune`: work straight on the database (`audit export
--server` reads through the API instead: remediator/cli/incident.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TextIO

from sqlalchemy import select

from remediator.store.audit import ChainReport, walk_chain
from remediator.store.audit_checkpoint import audit_head, load_checkpoint
from remediator.store.db import make_engine, make_sessionmaker
from remediator.store.incident_archive import audit_line
from remediator.store.models import AuditEvent
from remediator.store.repository import Repository
from remediator.store.retention import PruneReport, prune

__all__ = ["export", "head", "parse_anchor", "prune_database", "verify"]

_ANCHOR = re.compile(r"^(\d+):([0-9a-f]{64})$")


def parse_anchor(text: str) -> tuple[int, str]:
    """`SEQ:HASH` as printed by `remediator audit head` and logged by the controller."""
    m = _ANCHOR.match(text.strip().removeprefix("audit head ").strip())
    if not m:
        raise ValueError(f"anchor {text!r}: expected SEQ:HASH as printed by `remediator audit head`")
    return int(m.group(1)), m.group(2)


@asynccontextmanager
async def _repo(url: str) -> AsyncIterator[Repository]:
    engine = make_engine(url)
    try:
        yield Repository(make_sessionmaker(engine))
    finally:
        await engine.dispose()


async def _walk(url: str, key: bytes | None) -> tuple[list[AuditEvent], ChainReport, int | None]:
    async with _repo(url) as repo, repo.transaction() as session:
        events = list((await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all())
        checkpoint = await load_checkpoint(session)
    return events, walk_chain(events, key=key, checkpoint=checkpoint), checkpoint.seq if checkpoint else None


def _check_anchor(events: list[AuditEvent], anchor: tuple[int, str], cut: int | None) -> str | None:
    seq, digest = anchor
    if cut is not None and seq <= cut:
        return None  # pruned since: the signed checkpoint lies past it and the chain continues from there
    by_id = {e.id: e.hash for e in events}
    if seq not in by_id:
        return f"anchor {seq}: that event is missing: the newest events were deleted (truncated)"
    if by_id[seq] != digest:
        return f"anchor {seq}: the event's hash differs from the anchor: the log was rewritten or truncated"
    return None


async def verify(url: str, key: bytes | None = None, anchor: tuple[int, str] | None = None) -> tuple[bool, str]:
    events, report, cut = await _walk(url, key)
    if report.problem is not None:
        return False, f"audit event {report.problem.event_id}: {report.problem.reason}"
    if anchor is not None and (problem := _check_anchor(events, anchor, cut)) is not None:
        return False, problem
    parts = [f"ok: {report.events} audit events, hash chain intact"]
    if cut is not None:
        parts.append(f"from the signed checkpoint at event {cut}")
    if key is None:
        parts.append("(UNKEYED: set REMEDIATOR_AUDIT_KEY to make edits detectable)")
    elif report.unkeyed:
        parts.append(f"({report.unkeyed} early events were written before the audit key was set)")
    if anchor is not None:
        parts.append(f"and reaches anchor {anchor[0]}")
    if report.head is not None:
        parts.append(f"; head {report.head[0]}:{report.head[1]}")
    return True, " ".join(parts).replace(" ;", ";")


async def head(url: str) -> str | None:
    """`SEQ:HASH` of the newest event, or None for an empty log."""
    async with _repo(url) as repo, repo.transaction() as session:
        found = await audit_head(session)
    return None if found is None else f"{found[0]}:{found[1]}"


async def prune_database(
    url: str, key: bytes | None, *, audit_before: datetime | None, alerts_before: datetime | None
) -> PruneReport:
    async with _repo(url) as repo:
        repo.audit_key = key
        return await prune(repo, audit_before=audit_before, alerts_before=alerts_before)


async def export(
    url: str, out: TextIO, *, since: datetime | None = None, until: datetime | None = None, node: str | None = None,
    remediation: str | None = None,
) -> int:
    """Audit events oldest first, one JSON line each with the timestamp in ISO 8601 with `+00:00`; `since`
    inclusive, `until` exclusive, `node` (events of remediations on it), `remediation` (an id or a unique prefix:
    ValueError when it names none or several). Returns how many were written."""
    count, after = 0, 0
    async with _repo(url) as repo:
        rem_id = await _remediation_id(repo, remediation) if remediation else None
        while True:
            page = await repo.list_audit(remediation_id=rem_id, node=node, since=since, until=until,
                                         after_id=after, limit=_PAGE)
            for e in page:
                out.write(audit_line({
                    "id": e.id, "ts": e.ts, "remediation_id": e.remediation_id, "kind": e.kind, "actor": e.actor,
                    "data": e.data, "prev_hash": e.prev_hash, "hash": e.hash,
                }) + "\n")
            count += len(page)
            if len(page) < _PAGE:
                return count
            after = page[-1].id


_PAGE = 10000


async def _remediation_id(repo: Repository, given: str) -> str:
    ref = given.strip().lower()
    if await repo.get(ref) is not None:
        return ref
    found = [r.id for r in await repo.list_remediations(id_prefix=ref, limit=11)] if ref else []
    if not found:
        raise ValueError(f"--remediation {given!r}: no remediation ID starts with it")
    if len(found) > 1:
        raise ValueError(f"--remediation {given!r} fits several remediations ({', '.join(found[:10])})")
    return found[0]

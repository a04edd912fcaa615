"""Keyed audit chain, anchors and retention: rewrites without the key, truncation of the newest events,
forged checkpoints are caught; pruning behind a signed checkpoint still verifies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select, update

from remediator.store.audit import checkpoint_mac, event_hash, walk_chain
from remediator.store.audit_checkpoint import CHECKPOINT_KEY, load_checkpoint
from remediator.store.audit_tools import verify
from remediator.store.models import AlertRow, AuditEvent, ControllerState
from remediator.store.repository import Repository
from remediator.store.retention import prune
from tests.store.test_intake_store import payload

KEY = b"k" * 32
OLD = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


async def _events(repo: Repository) -> list[AuditEvent]:
    async with repo.transaction() as session:
        return list((await session.scalars(select(AuditEvent).order_by(AuditEvent.id))).all())


async def _write(repo: Repository, n: int, tag: str) -> None:
    for i in range(n):
        async with repo.transaction() as session:
            await repo.audit(session, "test.event", data={"tag": tag, "i": i})


def _url(repo: Repository) -> str:
    bind = repo._sessions.kw["bind"]
    return str(bind.url)


async def test_keyed_chain_catches_an_edit_rehashed_without_the_key(repo: Repository) -> None:
    repo.audit_key = KEY
    await _write(repo, 5, "a")
    events = await _events(repo)
    assert walk_chain(events, key=KEY).keyed == 5
    # The attacker edits event 2 and recomputes every later hash, but has no key: plain SHA-256.
    prev = events[1].hash
    async with repo.transaction() as session:
        for e in events[2:]:
            data = {"tag": "forged", "i": 0} if e.id == events[2].id else e.data
            digest = event_hash(ts=e.ts, remediation_id=e.remediation_id, kind=e.kind, actor=e.actor, data=data,
                                prev_hash=prev)
            await session.execute(update(AuditEvent).where(AuditEvent.id == e.id).values(
                data=data, prev_hash=prev, hash=digest))
            prev = digest
    ok, message = await verify(_url(repo), KEY)
    assert not ok and message.startswith(f"audit event {events[2].id}:")
    # Guessing a key does not help either.
    report = walk_chain(await _events(repo), key=b"x" * 32)
    assert report.problem is not None and report.problem.event_id == events[0].id


async def test_anchor_catches_deletion_of_the_newest_events(repo: Repository) -> None:
    repo.audit_key = KEY
    await _write(repo, 6, "a")
    events = await _events(repo)
    anchor = (events[-1].id, events[-1].hash)
    assert (await verify(_url(repo), KEY, anchor))[0]
    async with repo.transaction() as session:
        await session.execute(delete(AuditEvent).where(AuditEvent.id > events[2].id))
    assert (await verify(_url(repo), KEY))[0]  # a shorter chain is intact on its own...
    ok, message = await verify(_url(repo), KEY, anchor)
    assert not ok and "truncated" in message  # ...but not against the head kept elsewhere
    # New events written over the deleted ids do not fool the anchor either.
    await _write(repo, 3, "b")
    ok, message = await verify(_url(repo), KEY, anchor)
    assert not ok and f"anchor {anchor[0]}" in message


async def test_prune_writes_a_signed_checkpoint_and_the_rest_still_verifies(repo: Repository) -> None:
    repo.audit_key = KEY
    clock = Clock(OLD)
    repo.clock = clock
    await repo.store_batch(payload())
    await _write(repo, 10, "old")
    async with repo.transaction() as session:
        await session.execute(update(AlertRow).values(state="done"))
    clock.at = OLD + timedelta(days=100)
    await _write(repo, 4, "new")
    before = await _events(repo)
    anchor = (before[-1].id, before[-1].hash)

    report = await prune(repo, audit_before=OLD + timedelta(days=50), alerts_before=OLD + timedelta(days=50))

    assert report.audit_events == 10 and report.alerts >= 1 and report.batches == 1
    after = await _events(repo)
    assert [e.data.get("tag") for e in after][:4] == ["new"] * 4
    assert after[-1].kind == "retention.pruned" and after[-1].data["audit_events_deleted"] == 10
    async with repo.transaction() as session:
        checkpoint = await load_checkpoint(session)
        assert (await session.scalars(select(AlertRow))).all() == []
    assert checkpoint is not None and checkpoint.seq == before[9].id and checkpoint.hash == before[9].hash
    ok, message = await verify(_url(repo), KEY, anchor)
    assert ok and f"checkpoint at event {checkpoint.seq}" in message, message
    await _write(repo, 2, "later")  # the chain goes on from the pruned state
    assert (await verify(_url(repo), KEY))[0]


async def test_prune_keeps_unprocessed_alerts_and_the_newest_event(repo: Repository) -> None:
    repo.audit_key = KEY
    repo.clock = Clock(OLD)
    await repo.store_batch(payload())
    await _write(repo, 3, "old")
    report = await prune(repo, audit_before=OLD + timedelta(days=1), alerts_before=OLD + timedelta(days=1))
    assert report.alerts == 0  # still waiting to be processed
    assert report.audit_events == 2  # the newest old event stays: the chain's head is never deleted
    assert (await verify(_url(repo), KEY))[0]


async def test_a_forged_or_missing_checkpoint_fails(repo: Repository) -> None:
    repo.audit_key = KEY
    clock = Clock(OLD)
    repo.clock = clock
    await _write(repo, 6, "old")
    clock.at = OLD + timedelta(days=10)
    await _write(repo, 6, "new")
    await prune(repo, audit_before=OLD + timedelta(days=5), alerts_before=None)
    events = await _events(repo)
    # Hide two more events: delete them and move the checkpoint past them, signed without the key.
    hidden = events[1]
    async with repo.transaction() as session:
        await session.execute(delete(AuditEvent).where(AuditEvent.id <= hidden.id))
        row = await session.get(ControllerState, CHECKPOINT_KEY)
        assert row is not None
        row.value = {"seq": hidden.id, "hash": hidden.hash, "mac": checkpoint_mac(hidden.id, hidden.hash, None)}
    ok, message = await verify(_url(repo), KEY)
    assert not ok and "checkpoint signature does not match" in message
    async with repo.transaction() as session:
        await session.execute(delete(ControllerState).where(ControllerState.key == CHECKPOINT_KEY))
    ok, message = await verify(_url(repo), KEY)
    assert not ok and "older events deleted" in message


async def test_unkeyed_prefix_is_reported_and_an_unkeyed_event_after_keyed_ones_fails(repo: Repository) -> None:
    await _write(repo, 2, "before-key")
    repo.audit_key = KEY
    await _write(repo, 2, "keyed")
    report = walk_chain(await _events(repo), key=KEY)
    assert report.problem is None and (report.unkeyed, report.keyed) == (2, 2)
    ok, message = await verify(_url(repo), KEY)
    assert ok and "2 early events were written before the audit key was set" in message
    repo.audit_key = None
    await _write(repo, 1, "unkeyed-again")
    ok, message = await verify(_url(repo), KEY)
    assert not ok and "no keyed hash after keyed events" in message

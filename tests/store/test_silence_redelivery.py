"""A repeat of a silenced alert whose silence ended puts it back to be decided, once, at the store.

Against SQLite and PostgreSQL: duplicate repeats at once from one repository and from two (two replicas)
put it back once; on PostgreSQL a repeat racing another replica's uncommitted put-back waits for the row and
then leaves it alone (made deterministic as in test_redelivery.py); a silence in force keeps it; a
silence that matches another alert does not.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from remediator.domain.silences import SILENCED_NOTE, SilenceMatcher
from remediator.store.repository import Repository
from tests.store.test_approval_decisions import store, store_url  # noqa: F401  (fixtures)
from tests.store.test_intake_store import payload
from tests.store.test_postgres import pg_repo  # noqa: F401  (fixture)
from tests.store.test_redelivery import alert_states, redelivered, repeat_racing_a_put_back, repeats_from_two_replicas


async def silenced(repo: Repository, *, expire: bool = True) -> tuple[int, str]:
    """A first delivery held by a silence on its node (expired now unless `expire` is false): (alert id,
    silence id)."""
    now = repo.clock()
    silence = await repo.create_silence([SilenceMatcher("Hostname", "n1")], starts_at=now,
                                        ends_at=now + timedelta(hours=2), created_by="alice", comment="rack 4",
                                        actor="api")
    await repo.store_batch(payload())
    (alert,) = await repo.claim_alerts("worker-a", 10, timedelta(seconds=30))
    await repo.finish_alert(alert.id, "silenced", note=f"{SILENCED_NOTE}{silence.id}")
    if expire:
        await repo.expire_silence(silence.id, actor="api")
    return alert.id, silence.id


async def test_a_silence_in_force_keeps_the_alert_and_its_end_lets_it_go(store: Repository) -> None:  # noqa: F811
    alert_id, sid = await silenced(store, expire=False)
    assert (await store.store_batch(payload())).repeats == 1
    assert await alert_states(store) == [("done", "silenced"), ("repeat", None)]
    await store.expire_silence(sid, actor="api")
    await store.store_batch(payload())
    assert await alert_states(store) == [("new", None), ("repeat", None), ("repeat", None)]
    (event,) = await redelivered(store)
    assert event == {"alert_id": alert_id, "reason": f"silence {sid} ended: deciding again", "silence_id": sid}
    (claimed,) = await store.claim_alerts("worker-a", 10, timedelta(seconds=30))
    assert claimed.id == alert_id and claimed.note == f"silence {sid} ended: deciding again"


async def test_a_silence_of_other_alerts_does_not_keep_it(store: Repository) -> None:  # noqa: F811
    await silenced(store)
    now = store.clock()
    await store.create_silence([SilenceMatcher("Hostname", "n2")], starts_at=now, ends_at=now + timedelta(hours=1),
                               created_by="bob", comment="other rack", actor="api")
    await store.store_batch(payload())
    assert (await alert_states(store))[0] == ("new", None)


async def test_duplicate_repeats_at_once_put_it_back_once(store: Repository, store_url: str) -> None:  # noqa: F811
    await silenced(store)
    await repeats_from_two_replicas(store, store_url, 4)
    states = await alert_states(store)
    assert states[0] == ("new", None) and states[1:] == [("repeat", None)] * 8
    assert len(await redelivered(store)) == 1


@pytest.mark.postgres
async def test_a_repeat_racing_an_uncommitted_put_back_leaves_the_alert_alone(
    pg_repo: Repository, pg_url: str  # noqa: F811
) -> None:
    """Another replica has put the alert back and not yet committed: this delivery's read still finds it
    silenced, its update waits on the row, then finds it `new` and changes nothing."""
    alert_id, _ = await silenced(pg_repo)
    put_back = "UPDATE alerts SET state = 'new', outcome = NULL WHERE id = :id"
    stored = await repeat_racing_a_put_back(pg_repo, pg_url, put_back, alert_id)
    assert stored.repeats == 1
    assert await alert_states(pg_repo) == [("new", None), ("repeat", None)]
    assert not await redelivered(pg_repo)  # the other replica's put-back is the only one

"""A still-firing alert held by a silence is decided again by its next repeat delivery once the silence ends.

Alertmanager sends a firing alert again with the same fingerprint and startsAt (repeat_interval); the
controller stores those as repeats. After the silence that held the first delivery ends (DELETE, or its end
time passes on the injected store clock), such a repeat puts the alert back to be decided
(store/redelivery.py), once however many repeats arrive at once; while a silence still matches, or after
the alert was resolved, a repeat decides nothing. Through the real HTTP API and worker, on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_silences import AUTH, audit, create, m, silence_body
from tests.approvals.harness import Gated, gated_controller
from tests.helpers import am_alert, am_payload, xid_labels

LABELS = xid_labels("gpu-node-12", 79)
STARTS = "2026-12-02T10:00:00Z"


@pytest.fixture
async def g(tmp_path: Path) -> Any:
    async with gated_controller(tmp_path) as controller:
        yield controller


async def post(g: Gated, status: str = "firing") -> dict[str, Any]:
    """One delivery of the same alert instance (same labels, so same fingerprint, and same startsAt)."""
    r = await g.client.post("/api/v1/alerts", json=am_payload(am_alert(LABELS, status=status, starts_at=STARTS)),
                            headers=AUTH)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def remediations(g: Gated) -> list[dict[str, Any]]:
    return list((await g.client.get("/api/v1/remediations", headers=AUTH)).json())


async def alerts(g: Gated) -> list[tuple[str, str | None]]:
    shown = (await g.client.get("/api/v1/alerts", params={"limit": 1000}, headers=AUTH)).json()
    return [(a["state"], a["outcome"]) for a in sorted(shown, key=lambda a: a["id"])]


async def silenced_first(g: Gated, **body: Any) -> str:
    """A silence on this node, and the alert's first delivery held by it."""
    sid = await create(g, silence_body(g, [m("Hostname", "gpu-node-12")], **body))
    await post(g)
    await g.settle()
    assert await alerts(g) == [("done", "silenced")]
    assert await remediations(g) == []
    return sid


async def test_a_repeat_after_the_silence_is_deleted_starts_the_remediation(g: Gated) -> None:
    sid = await silenced_first(g)
    assert (await g.client.delete(f"/api/v1/silences/{sid}", headers=AUTH)).status_code == 200
    assert (await post(g))["repeats"] == 1  # still answered and counted as a repeat
    await g.settle()
    (rem,) = await remediations(g)
    assert rem["node"] == "gpu-node-12"
    assert await alerts(g) == [("done", "started"), ("repeat", None)]
    (event,) = await audit(g, "alert.redelivered")
    assert event["data"]["reason"] == f"silence {sid} ended: deciding again"
    assert event["data"]["silence_id"] == sid and event["remediation_id"] is None
    # Decided now: later repeats read the remediation it started and decide nothing more.
    await post(g)
    await g.settle()
    assert len(await remediations(g)) == 1 and len(await audit(g, "alert.redelivered")) == 1


async def test_a_repeat_while_the_silence_holds_decides_nothing(g: Gated) -> None:
    await silenced_first(g, hours=2)
    g.clock.advance(timedelta(hours=1))  # half-way through the two hours
    for _ in range(3):
        await post(g)
        await g.settle()
    assert await remediations(g) == []
    assert await alerts(g) == [("done", "silenced")] + [("repeat", None)] * 3
    assert await audit(g, "alert.redelivered") == []
    # The repeats held nothing back: the first one after the end is decided.
    g.clock.advance(timedelta(hours=1, seconds=1))
    await post(g)
    await g.settle()
    assert len(await remediations(g)) == 1


async def test_a_repeat_another_silence_still_matches_decides_nothing(g: Gated) -> None:
    sid = await silenced_first(g)
    wider = await create(g, silence_body(g, [m("alertname", "GPUXidError")], hours=4))
    assert (await g.client.delete(f"/api/v1/silences/{sid}", headers=AUTH)).status_code == 200
    await post(g)
    await g.settle()
    assert await remediations(g) == []
    assert await alerts(g) == [("done", "silenced"), ("repeat", None)]
    assert await audit(g, "alert.redelivered") == []
    assert (await g.client.delete(f"/api/v1/silences/{wider}", headers=AUTH)).status_code == 200
    await post(g)
    await g.settle()
    assert len(await remediations(g)) == 1


async def test_a_repeat_after_the_silence_expired_by_time_starts_one_remediation(g: Gated) -> None:
    sid = await silenced_first(g, hours=1)
    g.clock.advance(timedelta(hours=1, seconds=1))
    assert (await g.client.get(f"/api/v1/silences/{sid}", headers=AUTH)).json()["status"]["state"] == "expired"
    await post(g)
    await g.settle()
    assert len(await remediations(g)) == 1
    (event,) = await audit(g, "alert.redelivered")
    assert event["data"]["reason"] == f"silence {sid} ended: deciding again"


async def test_a_resolved_alert_is_not_decided_again(g: Gated) -> None:
    sid = await silenced_first(g)
    await post(g, status="resolved")
    await g.settle()
    assert (await g.client.delete(f"/api/v1/silences/{sid}", headers=AUTH)).status_code == 200
    await post(g)  # a late firing repeat of the instance that resolved
    await g.settle()
    assert await remediations(g) == []
    assert await audit(g, "alert.redelivered") == []
    assert (await alerts(g))[0] == ("done", "silenced")


async def concurrent_repeats_start_one(g: Gated, other: Gated) -> None:
    """`g` and `other` are two replicas on one database: each gets the same repeats at once."""
    sid = await silenced_first(g)
    assert (await g.client.delete(f"/api/v1/silences/{sid}", headers=AUTH)).status_code == 200
    answers = await asyncio.gather(*(post(replica) for _ in range(4) for replica in (g, other)))
    assert [a["repeats"] for a in answers] == [1] * 8
    await g.settle()
    await other.settle()
    assert len(await remediations(g)) == 1
    assert len(await audit(g, "alert.redelivered")) == 1
    assert await alerts(g) == [("done", "started")] + [("repeat", None)] * 8


async def test_concurrent_repeats_start_one_remediation(tmp_path: Path) -> None:
    async with gated_controller(tmp_path) as first, gated_controller(tmp_path) as second:
        await concurrent_repeats_start_one(first, second)


@pytest.mark.postgres
async def test_concurrent_repeats_start_one_remediation_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    async with (gated_controller(tmp_path, database_url=pg_url) as first,
                gated_controller(tmp_path, database_url=pg_url) as second):
        await concurrent_repeats_start_one(first, second)

"""Silences through the HTTP API: create, match, expire, survive a restart, refuse bad input, audit.

A plan-only controller over SQLite (tests/approvals/harness.py) with an injected store clock, so expiry by
time is exercised by moving the clock, not by sleeping. Alerts go in through the webhook and the worker
decides them as in production.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.approvals.harness import TOKEN, Gated, gated_controller
from tests.helpers import am_alert, am_payload, xid_labels

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def silence_body(g: Gated, matchers: list[dict[str, Any]], *, hours: float = 2, **extra: Any) -> dict[str, Any]:
    return {
        "matchers": matchers, "startsAt": iso(g.clock.now), "endsAt": iso(g.clock.now + timedelta(hours=hours)),
        "comment": "maintenance of rack 4", **extra,
    }


def m(name: str, value: str, *, regex: bool = False, equal: bool = True) -> dict[str, Any]:
    return {"name": name, "value": value, "isRegex": regex, "isEqual": equal}


async def create(g: Gated, body: dict[str, Any]) -> str:
    r = await g.client.post("/api/v1/silences", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"silenceID"}
    return str(r.json()["silenceID"])


async def deliver(g: Gated, labels: dict[str, str], starts_at: str = "2026-12-02T10:00:00Z") -> dict[str, Any]:
    """Post one firing alert, let the worker decide it, and return it as GET /api/v1/alerts shows it."""
    r = await g.client.post("/api/v1/alerts", json=am_payload(am_alert(labels, starts_at=starts_at)), headers=AUTH)
    assert r.status_code == 200, r.text
    await g.settle()
    alerts = (await g.client.get("/api/v1/alerts", headers=AUTH)).json()
    return dict(alerts[0])


async def audit(g: Gated, kind: str) -> list[dict[str, Any]]:
    events = (await g.client.get("/api/v1/audit", params={"limit": 10000}, headers=AUTH)).json()
    return [e for e in events if e["kind"] == kind]


@pytest.fixture
async def g(tmp_path: Path) -> Any:
    async with gated_controller(tmp_path) as controller:
        yield controller


async def test_a_matching_alert_is_stored_as_silenced_and_starts_nothing(g: Gated) -> None:
    sid = await create(g, silence_body(g, [m("alertname", "GPUXidError"), m("Hostname", "gpu-node-1[0-9]", regex=True)],
                                       createdBy="Alice"))
    alert = await deliver(g, xid_labels("gpu-node-12", 79))
    assert alert["outcome"] == "silenced"
    assert alert["remediation_id"] is None
    assert alert["silence"]["id"] == sid
    assert alert["silence"]["createdBy"] == "Alice" and alert["silence"]["comment"] == "maintenance of rack 4"
    assert (await g.client.get("/api/v1/remediations", headers=AUTH)).json() == []
    (event,) = await audit(g, "alert.silenced")
    assert event["data"]["silence_id"] == sid and event["data"]["alert_id"] == alert["id"]
    unacted = (await g.client.get("/api/v1/alerts/unacted", params={"reason": "silenced"}, headers=AUTH)).json()
    assert [u["alert_id"] for u in unacted] == [alert["id"]]
    assert unacted[0]["silence"]["id"] == sid and "Alice" in unacted[0]["detail"]


async def test_a_non_matching_alert_proceeds(g: Gated) -> None:
    await create(g, silence_body(g, [m("Hostname", "gpu-node-1[0-9]", regex=True)]))
    # The regex is anchored as Alertmanager anchors it: gpu-node-1 and gpu-node-100 do not match 1[0-9].
    for node in ("gpu-node-1", "gpu-node-100"):
        alert = await deliver(g, xid_labels(node, 79))
        assert alert["outcome"] == "started", node
        assert alert["silence"] is None


async def test_negative_matchers(g: Gated) -> None:
    # Every Xid on gpu-node-3 except 13, on nodes not named like a test node.
    await create(g, silence_body(g, [
        m("Hostname", "gpu-node-3"), m("xid", "13", equal=False), m("pool", "test-.*", regex=True, equal=False),
    ]))
    assert (await deliver(g, xid_labels("gpu-node-3", 79)))["outcome"] == "silenced"
    labels = xid_labels("gpu-node-3", 79, uuid="GPU-8e6a1c2d-0000-4000-8000-000000000002", gpu="1", pool="test-a")
    assert (await deliver(g, labels))["outcome"] == "started"  # pool!~"test-.*" does not hold


async def test_expiry_by_time_stops_matching(g: Gated) -> None:
    sid = await create(g, silence_body(g, [m("alertname", "GPUXidError")], hours=1))
    assert (await deliver(g, xid_labels("gpu-node-1", 79)))["outcome"] == "silenced"
    g.clock.advance(timedelta(hours=1, seconds=1))
    shown = (await g.client.get(f"/api/v1/silences/{sid}", headers=AUTH)).json()
    assert shown["status"]["state"] == "expired"
    later = await deliver(g, xid_labels("gpu-node-2", 79), starts_at="2026-12-02T11:00:00Z")
    assert later["outcome"] == "started"


async def test_pending_silence_holds_nothing_until_it_starts(g: Gated) -> None:
    start = g.clock.now + timedelta(minutes=30)
    body = {**silence_body(g, [m("alertname", "GPUXidError")]), "startsAt": iso(start)}
    sid = await create(g, body)
    assert (await g.client.get(f"/api/v1/silences/{sid}", headers=AUTH)).json()["status"]["state"] == "pending"
    assert (await deliver(g, xid_labels("gpu-node-1", 79)))["outcome"] == "started"
    g.clock.advance(timedelta(minutes=31))
    listed = (await g.client.get("/api/v1/silences", params={"state": "active"}, headers=AUTH)).json()
    assert [s["id"] for s in listed] == [sid]
    assert (await deliver(g, xid_labels("gpu-node-2", 79), starts_at="2026-12-02T11:00:00Z"))["outcome"] == "silenced"


async def test_delete_expires_keeps_the_record_and_audits_the_actor(g: Gated) -> None:
    sid = await create(g, silence_body(g, [m("alertname", "GPUXidError")]))
    r = await g.client.delete(f"/api/v1/silences/{sid}", params={"comment": "rack back"}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["status"]["state"] == "expired" and r.json()["expiredBy"] == "api"
    assert (await g.client.get(f"/api/v1/silences/{sid}", headers=AUTH)).json()["status"]["state"] == "expired"
    assert (await deliver(g, xid_labels("gpu-node-1", 79)))["outcome"] == "started"
    (created,) = await audit(g, "silence.created")
    (expired,) = await audit(g, "silence.expired")
    assert created["actor"] == "api" and created["data"]["comment"] == "maintenance of rack 4"
    assert created["data"]["createdBy"] == "api"  # no createdBy: the authenticated actor
    assert expired["actor"] == "api" and expired["data"]["silence_id"] == sid
    assert expired["data"]["expire_comment"] == "rack back"
    # Expiring again changes nothing and audits nothing; an unknown id is a 404.
    assert (await g.client.delete(f"/api/v1/silences/{sid}", headers=AUTH)).status_code == 200
    assert len(await audit(g, "silence.expired")) == 1
    assert (await g.client.delete("/api/v1/silences/nope", headers=AUTH)).status_code == 404
    assert (await g.client.get("/api/v1/silences/nope", headers=AUTH)).status_code == 404


async def test_silences_survive_a_restart(tmp_path: Path) -> None:
    async with gated_controller(tmp_path) as first:
        sid = await create(first, silence_body(first, [m("alertname", "GPUXidError")], createdBy="Bob"))
    async with gated_controller(tmp_path) as second:
        alert = await deliver(second, xid_labels("gpu-node-1", 79))
        assert alert["outcome"] == "silenced" and alert["silence"]["id"] == sid
        listed = (await second.client.get("/api/v1/silences", headers=AUTH)).json()
        assert [(s["id"], s["createdBy"], s["status"]["state"]) for s in listed] == [(sid, "Bob", "active")]


@pytest.mark.parametrize(("change", "field"), [
    ({"matchers": []}, "matchers"),
    ({"matchers": [m("Hostname", "gpu-node-(", regex=True)]}, "matchers[0].value"),
    ({"matchers": [m("Hostname", "a", regex=True), m("xid", "(?=1)", regex=True)]}, "matchers[1].value"),
    ({"matchers": [m("Hostname", ".*", regex=True)]}, "matchers"),  # would silence every alert
    ({"matchers": [m("", "x")]}, "matchers[0].name"),
    ({"matchers": [{"name": "a", "value": "b"}]}, "matchers[0].isRegex"),
    ({"comment": "  "}, "comment"),
    ({"comment": None}, "comment"),
    ({"endsAt": "2020-01-01T00:00:00Z"}, "endsAt"),
    ({"endsAt": "2030-01-01T00:00:00"}, "endsAt"),  # no timezone
    ({"id": "abc"}, "id"),
])
async def test_bad_silences_are_422s_naming_the_field(g: Gated, change: dict[str, Any], field: str) -> None:
    body = {**silence_body(g, [m("alertname", "GPUXidError")]), **change}
    r = await g.client.post("/api/v1/silences", json=body, headers=AUTH)
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == field, r.json()
    assert (await g.client.get("/api/v1/silences", headers=AUTH)).json() == []


async def test_end_before_start_is_refused(g: Gated) -> None:
    body = silence_body(g, [m("alertname", "GPUXidError")])
    body["startsAt"] = iso(g.clock.now + timedelta(hours=3))
    r = await g.client.post("/api/v1/silences", json=body, headers=AUTH)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "endsAt"


async def test_the_api_needs_the_bearer_token(g: Gated) -> None:
    body = silence_body(g, [m("alertname", "GPUXidError")])
    assert (await g.client.post("/api/v1/silences", json=body)).status_code == 401
    assert (await g.client.get("/api/v1/silences")).status_code == 401

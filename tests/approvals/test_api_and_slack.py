"""The bearer API and Slack's interactivity endpoint take the same single-use decision path."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from remediator.adapters.slack_signature import sign, verify
from remediator.errors import SignatureError
from tests.approvals.harness import TOKEN, Gated, gated_controller

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


async def test_api_approve_then_second_decision_is_409(gated: Gated) -> None:
    rem = await gated.fire()
    r = await gated.client.post(
        f"/api/v1/remediations/{rem.id}/approve", json={"by": "chatops-bot"}, headers=AUTH
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "running"
    again = await gated.client.post(f"/api/v1/remediations/{rem.id}/reject", headers=AUTH)
    assert again.status_code == 409 and "approved by api:chatops-bot" in again.json()["detail"]
    await gated.settle()
    assert await gated.state(rem.id) == "planned"
    actors = {(e.kind, e.actor) for e in await gated.rt.repo.list_audit(remediation_id=rem.id)}
    assert ("state.running", "api:chatops-bot") in actors


async def test_api_decision_without_a_name_never_passes_an_allowlist(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, approvers=["carol"]) as gated:
        rem = await gated.fire()
        url = f"/api/v1/remediations/{rem.id}/approve"
        for body in (None, {}, {"by": "   "}, {"comment": "ship it"}):
            r = await gated.client.post(url, json=body, headers=AUTH)
            assert r.status_code == 403, (body, r.text)
            assert "REMEDIATOR_APPROVERS" in r.json()["detail"] and "by" in r.json()["detail"]
        r = await gated.client.post(url, json={"by": "mallory"}, headers=AUTH)
        assert r.status_code == 403 and "api:mallory is not on the list" in r.json()["detail"]
        assert await gated.state(rem.id) == "awaiting_approval"
        assert all(a.decision is None for a in await gated.rt.repo.approvals_of(rem.id))
        r = await gated.client.post(url, json={"by": "Carol"}, headers=AUTH)
        assert r.status_code == 200, r.text
        (approval,) = await gated.rt.repo.approvals_of(rem.id)
        assert approval.decided_by == "api:Carol"


async def test_api_decision_without_a_name_and_no_allowlist_is_recorded_as_api(gated: Gated) -> None:
    rem = await gated.fire()
    r = await gated.client.post(f"/api/v1/remediations/{rem.id}/reject", headers=AUTH)
    assert r.status_code == 200 and r.json()["state"] == "rejected"
    (approval,) = await gated.rt.repo.approvals_of(rem.id)
    assert approval.decided_by == "api"


async def test_api_reject_unknown_and_unauthenticated(gated: Gated) -> None:
    rem = await gated.fire()
    assert (await gated.client.post(f"/api/v1/remediations/{rem.id}/reject")).status_code == 401
    assert (await gated.client.post("/api/v1/remediations/nope/approve", headers=AUTH)).status_code == 404
    r = await gated.client.post(f"/api/v1/remediations/{rem.id}/reject", headers=AUTH)
    assert r.status_code == 200 and r.json()["state"] == "rejected"


async def test_api_on_a_remediation_that_never_waited_is_409(gated: Gated) -> None:
    labels = {"alertname": "GPUXidError", "Hostname": "n9", "UUID": "GPU-9", "gpu": "0", "xid": "13"}
    r = await gated.client.post(
        "/api/v1/alerts",
        headers=AUTH,
        json={
            "version": "4",
            "groupKey": "g",
            "status": "firing",
            "receiver": "r",
            "alerts": [
                {
                    "status": "firing",
                    "labels": labels,
                    "annotations": {},
                    "startsAt": "2026-12-02T10:00:00Z",
                    "fingerprint": "abc123",
                }
            ],
        },
    )
    assert r.status_code == 200
    await gated.settle()
    rows = await gated.rt.repo.list_remediations()
    assert not rows  # xid 13 matches no test rule: nothing to approve
    assert (await gated.client.post("/api/v1/remediations/none/approve", headers=AUTH)).status_code == 404


# -- Slack signatures ---------------------------------------------------------------------------


def test_signature_good_stale_bad_and_missing() -> None:
    body = b"payload=%7B%7D"
    now = 1_700_000_000
    good = sign(SECRET, str(now), body)
    verify(SECRET, str(now), good, body, now=lambda: now + 299)
    with pytest.raises(SignatureError, match="5 minutes"):
        verify(SECRET, str(now), good, body, now=lambda: now + 301)
    with pytest.raises(SignatureError, match="5 minutes"):
        verify(SECRET, str(now), good, body, now=lambda: now - 301)
    with pytest.raises(SignatureError, match="does not match"):
        verify(SECRET, str(now), good, body + b"x", now=lambda: now)
    with pytest.raises(SignatureError, match="does not match"):
        verify("other-secret", str(now), good, body, now=lambda: now)
    with pytest.raises(SignatureError, match="missing"):
        verify(SECRET, None, good, body)
    with pytest.raises(SignatureError, match="integer"):
        verify(SECRET, "soon", good, body)


def slack_request(
    value: str,
    action: str = "approve",
    *,
    user: str = "alice",
    user_id: str | None = "U123ALICE",
    email: str | None = None,
    ts: int | None = None,
    secret: str = SECRET,
) -> tuple[bytes, dict[str, str]]:
    who: dict[str, str] = {"username": user, "name": user}
    if user_id is not None:
        who["id"] = user_id
    if email is not None:
        who["email"] = email
    payload = {
        "type": "block_actions",
        "user": who,
        "actions": [{"action_id": action, "value": value, "type": "button"}],
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(ts if ts is not None else int(time.time()))
    return body, {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": sign(secret, stamp, body),
        "Content-Type": "application/x-www-form-urlencoded",
    }


async def test_slack_interactions_are_off_without_a_signing_secret(gated: Gated) -> None:
    rem = await gated.fire()
    body, headers = slack_request(rem.id)
    r = await gated.client.post("/slack/interactions", content=body, headers=headers)
    assert r.status_code == 404
    assert await gated.state(rem.id) == "awaiting_approval"


async def test_slack_bad_or_stale_signature_is_401_and_changes_nothing(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, slack_signing_secret=SECRET) as gated:
        rem = await gated.fire()
        token = await gated.token()
        for body, headers in (
            slack_request(token, secret="wrong"),
            slack_request(token, ts=int(time.time()) - 600),
        ):
            r = await gated.client.post("/slack/interactions", content=body, headers=headers)
            assert r.status_code == 401
        body, headers = slack_request(token)
        r = await gated.client.post("/slack/interactions", content=body + b"&x=1", headers=headers)
        assert r.status_code == 401
        assert await gated.state(rem.id) == "awaiting_approval"


async def test_slack_button_with_token_approves_once(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, slack_signing_secret=SECRET) as gated:
        rem = await gated.fire()
        message = next(m for m in gated.capture.messages if m.event == "approval_requested")
        interactive = {b.action_id: b.value for b in message.buttons if b.action_id}
        assert set(interactive) == {"approve", "reject"}
        body, headers = slack_request(str(interactive["approve"]))
        r = await gated.client.post("/slack/interactions", content=body, headers=headers)
        assert r.status_code == 200 and "Recorded" in r.json()["text"]
        body, headers = slack_request(str(interactive["reject"]), "reject", user="mallory", user_id="U0MALLORY")
        r = await gated.client.post("/slack/interactions", content=body, headers=headers)
        assert "Already decided" in r.json()["text"]
        await gated.settle()
        assert await gated.state(rem.id) == "planned"
        actors = {(e.kind, e.actor) for e in await gated.rt.repo.list_audit(remediation_id=rem.id)}
        assert ("state.running", "slack:U123ALICE") in actors


async def test_slack_button_by_remediation_id_and_allowlist(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, slack_signing_secret=SECRET, approvers=["slack:UCAROL"]) as gated:
        rem = await gated.fire()
        body, headers = slack_request(rem.id, "reject", user="dave", user_id="UDAVE")
        r = await gated.client.post("/slack/interactions", content=body, headers=headers)
        assert "not on the list" in r.json()["text"]
        assert await gated.state(rem.id) == "awaiting_approval"
        body, headers = slack_request(rem.id, "reject", user="carol", user_id="UCAROL")
        r = await gated.client.post("/slack/interactions", content=body, headers=headers)
        assert r.status_code == 200
        assert await gated.state(rem.id) == "rejected"


async def test_slack_allowlist_matches_the_immutable_user_id_only(tmp_path: Path) -> None:
    """A user may rename themselves `alice`; only Slack's user id says who clicked, and it is what is recorded."""
    async with gated_controller(
        tmp_path, slack_signing_secret=SECRET, approvers=["alice", "alice@example.com", "slack:UALICE01"]
    ) as gated:
        rem = await gated.fire()
        for body, headers in (
            slack_request(rem.id, user="alice", user_id="U0MALLORY", email="alice@example.com"),
            slack_request(rem.id, user="alice", user_id=None, email="alice@example.com"),
            slack_request(rem.id, user="alice", user_id="UALICE02"),
        ):
            r = await gated.client.post("/slack/interactions", content=body, headers=headers)
            assert r.status_code == 200
            assert "nothing was decided" in r.json()["text"]
            assert await gated.state(rem.id) == "awaiting_approval"
        body, headers = slack_request(rem.id, user="mallory", user_id="UALICE01")
        r = await gated.client.post("/slack/interactions", content=body, headers=headers)
        assert "Recorded" in r.json()["text"]
        (approval,) = await gated.rt.repo.approvals_of(rem.id)
        assert approval.decided_by == "slack:UALICE01" and approval.decision_source == "slack"
        fresh = await gated.rt.repo.current_approval(rem.id)
        assert fresh is not None and fresh.decided_by == "slack:UALICE01"


async def test_slack_garbage_after_a_valid_signature_is_a_clean_4xx(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, slack_signing_secret=SECRET) as gated:
        stamp = str(int(time.time()))
        body = b"payload=%7Bnot-json"
        headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": sign(SECRET, stamp, body)}
        r = await gated.client.post("/slack/interactions", content=body, headers=headers)
        assert r.status_code == 400
        assert isinstance(gated.client, httpx.AsyncClient)

"""Slack bot mode against a fake Slack Web API on 127.0.0.1: one message per remediation, edited in place
(also after a restart), threaded replies for failed steps, response_url follow-ups, Slack's error codes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from remediator.adapters.notifier import Message, SlackBot
from remediator.adapters.slack_signature import sign
from remediator.engine.notifications import NotificationService
from remediator.errors import NotificationFailed, SlackApiError
from tests.approvals.harness import TOKEN, gated_controller
from tests.notify.slack_api import FakeSlack, fake_slack

SECRET = "0123456789abcdef0123456789abcdef"
BOT_TOKEN = "xoxb-test-token"


def bot_settings(slack: FakeSlack, **more: Any) -> dict[str, Any]:
    return {
        "slack_bot_token": BOT_TOKEN,
        "slack_channel": "#gpu-ops",
        "slack_api_url": slack.url,
        "notify_attempts": 3,
        "notify_backoff": "10ms",
        **more,
    }


def texts(slack: FakeSlack) -> list[str]:
    return [c.body["text"] for c in slack.calls]


async def test_one_message_per_remediation_then_edits_of_that_message(tmp_path: Path) -> None:
    async with fake_slack() as slack, gated_controller(tmp_path, **bot_settings(slack)) as gated:
        assert gated.rt.notifier is not None and "slack" in gated.rt.notifier.channel_names
        rem = await gated.fire()
        await gated.settle()
        r = await gated.client.post(
            f"/api/v1/remediations/{rem.id}/approve",
            json={"by": "alice"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code == 200, r.text
        await gated.settle()
        assert await gated.state(rem.id) == "planned"  # plan-only
    posts, updates = slack.of("chat.postMessage"), slack.of("chat.update")
    assert len(posts) == 1, texts(slack)
    assert posts[0].body["channel"] == "#gpu-ops" and posts[0].auth == f"Bearer {BOT_TOKEN}"
    ts = "1700000000.000001"
    assert len(updates) >= 3 and {(u.body["ts"], u.body["channel"]) for u in updates} == {(ts, "C0GPUOPS")}
    shown = texts(slack)
    assert any(t.startswith("Approval needed") for t in shown)
    assert any(t.startswith("Approved") and "approved by api:alice" in t for t in shown)
    assert shown[-1].startswith("Remediation planned")
    # the approval request carried links; the later edits say where it stands, without stale approve links
    assert "/approvals/" in json.dumps(next(c.body for c in slack.calls if c.body["text"].startswith("Approval")))
    assert "/approvals/" not in json.dumps(updates[-1].body["blocks"])


async def test_a_restarted_controller_still_edits_the_same_message(tmp_path: Path) -> None:
    async with fake_slack() as slack:
        async with gated_controller(tmp_path, **bot_settings(slack)) as gated:
            rem = await gated.fire()
            await gated.settle()
        assert len(slack.of("chat.postMessage")) == 1
        before = len(slack.calls)
        async with gated_controller(tmp_path, **bot_settings(slack)) as again:  # same database, new process state
            assert again.rt.notifier is not None
            await again.rt.notifier.remediation_event(rem.id, "rejected", "Step *drain* rejected by bob.")
            await again.rt.notifier.flush(10)
    after = slack.calls[before:]
    assert [c.method for c in after] == ["chat.update"]
    assert after[0].body["ts"] == "1700000000.000001" and "rejected by bob" in after[0].body["text"]


async def test_a_failed_step_is_a_threaded_reply_and_webhooks_are_not_told(tmp_path: Path) -> None:
    defs = tmp_path / "defs"
    (defs / "rules").mkdir(parents=True)
    (defs / "playbooks").mkdir()
    (defs / "rules" / "r.yaml").write_text(
        "rules:\n  - name: xid-fatal\n    match: ['alertname=\"GPUXidError\"', 'xid=\"79\"']\n"
        "    playbook: broken-tell\n    kind: xid\n"
    )
    (defs / "playbooks" / "broken-tell.yaml").write_text(
        "name: broken-tell\ndescription: The second step cannot render its message.\ntarget: node\nsteps:\n"
        "  - name: mark\n    action: label\n    params: {key: remediator.io/state, value: suspect}\n"
        "  - name: tell\n    action: notify\n    on_failure: continue\n"
        "    params: {message: '{{ alert.labels.no_such_label }}'}\n"
    )
    async with (
        fake_slack() as slack,
        gated_controller(
            tmp_path, rules_dir=defs / "rules", playbooks_dir=defs / "playbooks", **bot_settings(slack)
        ) as gated,
    ):
        rem = await gated.fire()
        await gated.settle()
        assert await gated.state(rem.id) == "planned"  # plan-only
    replies = [c for c in slack.of("chat.postMessage") if "thread_ts" in c.body]
    (main,) = [c for c in slack.of("chat.postMessage") if "thread_ts" not in c.body]
    assert len(replies) == 1 and replies[0].body["thread_ts"] == "1700000000.000001"
    assert replies[0].body["channel"] == "C0GPUOPS"
    assert "tell" in replies[0].body["text"] and "no_such_label" in replies[0].body["text"]
    assert main.body["text"].startswith("Remediation started")
    assert slack.of("chat.update")[-1].body["text"].startswith("Remediation planned")
    assert "step_failed" not in {m.event for m in gated.capture.messages}  # a webhook-like channel: not sent


def slack_click(value: str, response_url: str) -> tuple[bytes, dict[str, str]]:
    payload = {
        "type": "block_actions",
        "user": {"id": "U123ALICE", "username": "alice"},
        "response_url": response_url,
        "actions": [{"action_id": "approve", "value": value, "type": "button"}],
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(int(time.time()))
    return body, {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": sign(SECRET, stamp, body),
        "Content-Type": "application/x-www-form-urlencoded",
    }


@pytest.mark.parametrize("bot", [True, False])
async def test_a_decision_in_slack_gets_a_response_url_follow_up(tmp_path: Path, bot: bool) -> None:
    async with fake_slack() as slack:
        extra = bot_settings(slack) if bot else {"notify_backoff": "10ms"}
        origin = slack.url.removesuffix("/api")  # the fake's http://127.0.0.1:<port>, allowed by name
        async with gated_controller(
            tmp_path, slack_signing_secret=SECRET, slack_response_url_hosts=origin, **extra
        ) as gated:
            rem = await gated.fire()
            body, headers = slack_click(rem.id, slack.response_url)
            r = await gated.client.post("/slack/interactions", content=body, headers=headers)
            assert r.status_code == 200 and "Recorded" in r.json()["text"]
            await slack.wait_until(lambda: slack.responses)
            await gated.settle()
    (follow_up,) = slack.responses
    assert "approved in Slack by slack:U123ALICE (alice)" in follow_up["text"]
    assert "continues with step drain" in follow_up["text"]
    if bot:  # the bot edits the message itself; the clicker is told privately
        assert follow_up["replace_original"] is False and follow_up["response_type"] == "ephemeral"
    else:  # an incoming webhook's message is replaced: who decided, and no buttons left to click
        assert follow_up["replace_original"] is True
        elements = [e for b in follow_up["blocks"] if b["type"] == "actions" for e in b["elements"]]
        assert elements and all("url" in e for e in elements)


MESSAGE = Message(event="started", title="Remediation started: p on n", text="go", remediation_id="r-1")


async def test_ratelimited_is_retried_after_retry_after() -> None:
    async with (
        fake_slack(errors={"chat.postMessage": ["ratelimited"]}, retry_after=1) as slack,
        httpx.AsyncClient() as http,
    ):
        bot = SlackBot(BOT_TOKEN, "#gpu-ops", http, api_url=slack.url, attempts=3, backoff_seconds=0.01)
        started = time.monotonic()
        await bot.send(MESSAGE)
        waited = time.monotonic() - started
    assert [c.method for c in slack.calls] == ["chat.postMessage", "chat.postMessage"]
    assert waited >= 0.9  # Slack's Retry-After, not the 10 ms backoff


@pytest.mark.parametrize("error", ["channel_not_found", "invalid_auth"])
async def test_permanent_slack_errors_are_not_retried(error: str) -> None:
    async with fake_slack(errors={"chat.postMessage": [error]}) as slack, httpx.AsyncClient() as http:
        bot = SlackBot(BOT_TOKEN, "#nowhere", http, api_url=slack.url, attempts=4, backoff_seconds=0.01)
        with pytest.raises(SlackApiError) as caught:
            await bot.send(MESSAGE)
    assert caught.value.error == error and not caught.value.retryable
    assert len(slack.calls) == 1


async def test_a_refused_slack_call_is_recorded_and_the_remediation_goes_on(tmp_path: Path) -> None:
    async with (
        fake_slack(errors={"chat.postMessage": ["channel_not_found"] * 5}) as slack,
        gated_controller(tmp_path, **bot_settings(slack)) as gated,
    ):
        rem = await gated.fire()
        await gated.settle()
        assert await gated.state(rem.id) == "awaiting_approval"
        failed = [e for e in await gated.rt.repo.list_audit() if e.kind == "notification.failed"]
        assert failed and failed[0].data["channel"] == "slack"
        assert "channel_not_found" in failed[0].data["error"]
    assert len(slack.of("chat.postMessage")) == 2  # one per event, no retries


async def test_a_deleted_message_is_posted_again_and_remembered() -> None:
    async with fake_slack() as slack, httpx.AsyncClient() as http:
        bot = SlackBot(BOT_TOKEN, "#gpu-ops", http, api_url=slack.url, attempts=2, backoff_seconds=0.01)
        await bot.send(MESSAGE)
        slack.messages.clear()  # someone deleted it in Slack
        await bot.send(MESSAGE)
        await bot.send(MESSAGE)
    assert [c.method for c in slack.calls] == ["chat.postMessage", "chat.update", "chat.postMessage", "chat.update"]
    assert slack.calls[-1].body["ts"] == "1700000000.000002"


async def test_http_errors_from_the_web_api_are_notification_failures() -> None:
    async with httpx.AsyncClient() as http:
        bot = SlackBot(BOT_TOKEN, "#c", http, api_url="http://127.0.0.1:9/api", attempts=2, backoff_seconds=0.01)
        with pytest.raises(NotificationFailed, match=r"chat\.postMessage"):
            await bot.send(MESSAGE)


async def test_without_a_threaded_channel_step_failures_are_not_queued(tmp_path: Path) -> None:
    async with gated_controller(tmp_path) as gated:
        rem = await gated.fire()
        service = NotificationService([gated.capture], gated.rt.repo, gated.rt.metrics, gated.settings)
        before = len(gated.capture.messages)
        await service.remediation_event(rem.id, "step_failed", "Step *x* failed")
        await service.aclose()
        assert len(gated.capture.messages) == before


def _decision_buttons(body: dict[str, Any]) -> list[str]:
    """The buttons of a message that decide or lead to a decision: Approve, Reject, an approval link."""
    return [
        str(element.get("action_id"))
        for block in body.get("blocks") or [] if block.get("type") == "actions"
        for element in block.get("elements") or []
        if element.get("action_id") in ("approve", "reject") or "/approvals/" in str(element.get("url") or "")
    ]


@pytest.mark.parametrize(("verb", "body", "source"), [
    ("cancel", {"reason": "wrong node", "by": "dan"}, "cancelled"),
    ("return", {"reason": "hardware swapped", "by": "dan", "skip": ["reboot"]}, "returned to service"),
])
async def test_a_superseded_approval_request_loses_its_buttons_in_slack(
    tmp_path: Path, verb: str, body: dict[str, Any], source: str
) -> None:
    async with fake_slack() as slack, gated_controller(
        tmp_path, **bot_settings(slack, slack_signing_secret=SECRET)
    ) as gated:
        rem = await gated.fire()
        await gated.settle()
        asked = [c for c in slack.calls if c.body["text"].startswith("Approval needed")]
        assert asked and sorted(_decision_buttons(asked[-1].body)) == ["approve", "link-0", "reject"], texts(slack)
        ts = slack.of("chat.postMessage")[0].body.get("ts") or "1700000000.000001"
        before = len(slack.calls)
        r = await gated.client.post(
            f"/api/v1/remediations/{rem.id}/{verb}", json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert r.status_code == 200, r.text
        await gated.settle()
    later = slack.calls[before:]
    updates = [c for c in later if c.method == "chat.update"]
    assert updates and {u.body["ts"] for u in updates} == {ts}, [(c.method, c.body) for c in later]
    superseded = [u for u in updates if "superseded" in u.body["text"]]
    assert superseded, texts(slack)
    assert f"{source} by api:dan" in superseded[0].body["text"]
    for update in updates:  # from the supersede on, no message offers Approve or Reject any more
        assert _decision_buttons(update.body) == [] and "/approvals/" not in json.dumps(update.body["blocks"])
    assert not [c for c in later if c.method == "chat.postMessage"]

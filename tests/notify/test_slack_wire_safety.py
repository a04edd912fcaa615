"""What the controller sends to Slack cannot be turned against the people reading it.

A Slack interaction's `response_url` is followed only to the allowed origins (Slack's own hosts over https
unless `REMEDIATOR_SLACK_RESPONSE_URL_HOSTS` says otherwise); a refused one is logged and audited, and the
decision still stands. Every text that reaches Slack (the top-level `text`, Block Kit mrkdwn, chat.update
edits, response_url follow-ups, interaction replies, `notify` steps) is mrkdwn-escaped, so `<!channel>`,
`<https://...|label>` and `&` taken from alerts, playbooks or Slack user names arrive as literal text.
All of it through real HTTP: receivers and a fake Slack on 127.0.0.1.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.actions.base import ActionContext, Target
from remediator.actions.notify import Notify
from remediator.adapters.notifier import SlackWebhook, response_url_refusal, slack_escape
from remediator.adapters.slack_signature import sign
from remediator.engine.notifications import NotificationService
from remediator.errors import ConfigError
from remediator.settings import Settings, load_settings
from tests.approvals.harness import TOKEN, gated_controller
from tests.helpers import am_alert, am_payload, xid_labels
from tests.notify.receiver import receiver
from tests.notify.slack_api import fake_slack
from tests.notify.test_slack_bot import SECRET, bot_settings, slack_click

HOSTILE = "<!channel> read <https://evil.example/x|the runbook> & act"
ESCAPED = "&lt;!channel&gt; read &lt;https://evil.example/x|the runbook&gt; &amp; act"


def mrkdwn_texts(body: Any) -> list[str]:
    """Every string Slack reads as mrkdwn: top-level `text` and each text object of type mrkdwn."""
    out: list[str] = []
    if isinstance(body, dict):
        if isinstance(body.get("text"), str) and body.get("type", "mrkdwn") == "mrkdwn":
            out.append(body["text"])
        for key, value in body.items():
            if key != "text" or not isinstance(value, str):
                out.extend(mrkdwn_texts(value))
    elif isinstance(body, list):
        for item in body:
            out.extend(mrkdwn_texts(item))
    return out


def assert_literal(body: dict[str, Any]) -> None:
    """No mrkdwn text of `body` holds a raw `<`, `>` or an `&` that does not start an entity."""
    texts = mrkdwn_texts(body)
    assert texts, body
    for text in texts:
        assert "<" not in text and ">" not in text, text
        assert "&" not in re.sub(r"&(amp|lt|gt);", "", text), text


def sign_again(body: bytes, headers: dict[str, str]) -> str:
    """The signature of an edited click body (same timestamp)."""
    return sign(SECRET, headers["X-Slack-Request-Timestamp"], body)


async def post_alert(client: Any, summary: str) -> None:
    labels = xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml")
    body = am_payload(am_alert(labels, annotations={"summary": summary}))
    r = await client.post("/api/v1/alerts", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text


# -- response_url: only to the allowed origins -------------------------------------------------------


@pytest.mark.parametrize("hosts", [None, "127.0.0.1"], ids=["default-slack-hosts", "bare-host-means-https"])
async def test_a_response_url_outside_the_allowed_origins_is_refused_logged_and_the_decision_stands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, hosts: str | None
) -> None:
    extra = {} if hosts is None else {"slack_response_url_hosts": hosts}
    async with (
        receiver() as rec,
        gated_controller(tmp_path, slack_signing_secret=SECRET, notify_backoff="10ms", **extra) as gated,
    ):
        rem = await gated.fire()
        body, headers = slack_click(rem.id, rec.url)
        with caplog.at_level(logging.WARNING):
            r = await gated.client.post("/slack/interactions", content=body, headers=headers)
            assert r.status_code == 200 and r.json()["text"].startswith("Recorded"), r.text
            await gated.settle()
        assert await gated.state(rem.id) == "planned"  # approved and run plan-only; only the URL was refused
        failed = [
            e
            for e in await gated.rt.repo.list_audit()
            if e.kind == "notification.failed" and e.data["channel"] == "slack-response"
        ]
        assert len(failed) == 1 and failed[0].remediation_id == rem.id
        origin = rec.url.removesuffix("/hook")
        assert f"{origin} is not in REMEDIATOR_SLACK_RESPONSE_URL_HOSTS" in failed[0].data["error"]
        metrics = (await gated.client.get("/metrics")).text
        assert 'remediator_notifications_total{channel="slack-response",outcome="failed"}' in metrics
    assert rec.attempts == 0  # not a single connection to the payload's host
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("REMEDIATOR_SLACK_RESPONSE_URL_HOSTS" in m and origin in m for m in warned), warned


def test_the_default_allow_list_is_slacks_hosts_over_https_only() -> None:
    allowed = Settings(database_url="sqlite+aiosqlite:///:memory:").slack_response_origins
    assert allowed == {("https", "hooks.slack.com", 443), ("https", "hooks.slack-gov.com", 443)}
    for url in (
        "https://hooks.slack.com/actions/T0/123/abc",
        "https://HOOKS.Slack.com/actions/T0/123/abc",
        "https://hooks.slack.com:443/actions/T0/123/abc",
        "https://hooks.slack-gov.com/actions/T0/123/abc",
    ):
        assert response_url_refusal(url, allowed) is None, url
    for url in (
        "http://hooks.slack.com/actions/T0/123/abc",
        "https://hooks.slack.com:8443/actions/x",
        "https://hooks.slack.com.evil.example/actions/x",
        "https://hooks.slack.com./actions/x",
        "https://evil.example/hooks.slack.com/actions/x",
        "https://hooks.slack.com@evil.example/actions/x",
        "https://hooks.slack.com\\@evil.example/actions/x",
        "https://evil.example#@hooks.slack.com/",
        "https://user@hooks.slack.com/actions/x",
        "https://slack.com/api/chat.postMessage",
        "https://127.0.0.1/actions/x",
        "file:///etc/passwd",
        "not a url",
        "",
    ):
        assert response_url_refusal(url, allowed) is not None, url


def test_the_allow_list_setting_takes_hosts_and_origins_and_refuses_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REMEDIATOR_SLACK_RESPONSE_URL_HOSTS", "hooks.slack.com, http://127.0.0.1:8123, [::1]:9443")
    settings = load_settings()
    assert settings.slack_response_origins == {
        ("https", "hooks.slack.com", 443),
        ("http", "127.0.0.1", 8123),
        ("https", "::1", 9443),
    }
    assert response_url_refusal("http://127.0.0.1:8123/response/x", settings.slack_response_origins) is None
    assert response_url_refusal("https://127.0.0.1:8123/response/x", settings.slack_response_origins) is not None
    monkeypatch.delenv("REMEDIATOR_SLACK_RESPONSE_URL_HOSTS")
    for bad in ("ftp://hooks.slack.com", "https://hooks.slack.com/actions", "user@hooks.slack.com", "host:70000"):
        with pytest.raises(ConfigError, match="SLACK_RESPONSE_URL_HOSTS"):
            load_settings(slack_response_url_hosts=bad)


# -- mrkdwn escaping everywhere text reaches Slack ---------------------------------------------------


def test_slack_escape_never_cuts_an_entity_in_half() -> None:
    assert slack_escape(HOSTILE) == ESCAPED
    for limit in range(1, len(ESCAPED) + 1):
        cut = slack_escape(HOSTILE, limit)
        assert len(cut) <= limit and ESCAPED.startswith(cut)
        assert "&" not in re.sub(r"&(amp|lt|gt);", "", cut), cut


async def test_webhook_messages_reach_slack_escaped(tmp_path: Path) -> None:
    async with receiver() as rec, gated_controller(tmp_path, slack_webhook_url=rec.url) as gated:
        await post_alert(gated.client, HOSTILE)
        await gated.settle()
    assert rec.bodies
    for body in rec.bodies:
        assert_literal(body)
    assert ESCAPED in rec.bodies[0]["text"]  # the alert's summary, in the fallback text as in the blocks


async def test_a_notify_step_reaches_slack_escaped(tmp_path: Path) -> None:
    settings = Settings(database_url="sqlite+aiosqlite:///:memory:")
    async with receiver() as rec, httpx.AsyncClient() as http:
        service = NotificationService([SlackWebhook(rec.url, http)], None, None, settings)  # type: ignore[arg-type]
        ctx = ActionContext(
            remediation_id="r-9",
            step_name="tell",
            target=Target(kind="node", node="gpu-node-1"),
            settings=settings,
            dry_run=False,
            alert={"name": "GPUXidError <!here>"},
            notifier=service,
        )
        action = Notify()
        result = await action.run(ctx, action.parse({"message": HOSTILE}))
        assert result.output["sent"] is True
        await service.aclose()
    (body,) = rec.bodies
    assert_literal(body)
    assert body["text"] == f"GPUXidError &lt;!here&gt; on node:gpu-node-1: {ESCAPED}"


async def test_bot_posts_and_chat_update_edits_reach_slack_escaped(tmp_path: Path) -> None:
    async with fake_slack() as slack, gated_controller(tmp_path, **bot_settings(slack)) as gated:
        await post_alert(gated.client, HOSTILE)
        await gated.settle()
        (rem,) = await gated.rt.repo.list_remediations()
        r = await gated.client.post(
            f"/api/v1/remediations/{rem.id}/approve", json={"by": "<!channel>"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert r.status_code == 200, r.text
        await gated.settle()
    assert slack.of("chat.postMessage") and len(slack.of("chat.update")) >= 2
    for call in slack.calls:
        assert_literal(call.body)
    assert any(ESCAPED in c.body["text"] for c in slack.of("chat.update"))
    assert any("api:&lt;!channel&gt;" in c.body["text"] for c in slack.of("chat.update"))


@pytest.mark.parametrize("bot", [True, False], ids=["bot-ephemeral", "webhook-replace"])
async def test_follow_ups_and_interaction_replies_reach_slack_escaped(tmp_path: Path, bot: bool) -> None:
    async with fake_slack() as slack:
        extra = bot_settings(slack) if bot else {"notify_backoff": "10ms"}
        origin = slack.url.removesuffix("/api")
        async with gated_controller(
            tmp_path, slack_signing_secret=SECRET, slack_response_url_hosts=origin, **extra
        ) as gated:
            rem = await gated.fire()
            body, headers = slack_click(rem.id, slack.response_url)
            body = body.replace(b"alice", b"%3C%21channel%3E+%26+co")  # the username "<!channel> & co"
            headers["X-Slack-Signature"] = sign_again(body, headers)
            r = await gated.client.post("/slack/interactions", content=body, headers=headers)
            assert r.status_code == 200 and r.json()["text"].startswith("Recorded"), r.text
            await slack.wait_until(lambda: slack.responses)
            await gated.settle()
    (follow_up,) = slack.responses
    assert_literal(follow_up)
    assert "slack:U123ALICE (&lt;!channel&gt; &amp; co)" in follow_up["text"]


async def test_a_refused_clicker_is_answered_escaped(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, slack_signing_secret=SECRET, approvers="slack:U999BOB") as gated:
        rem = await gated.fire()
        body, headers = slack_click(rem.id, "https://hooks.slack.com/actions/T0/1/x")
        body = body.replace(b"alice", b"%3C%21channel%3E")
        headers["X-Slack-Signature"] = sign_again(body, headers)
        r = await gated.client.post("/slack/interactions", content=body, headers=headers)
        assert r.status_code == 200
        assert await gated.state(rem.id) == "awaiting_approval"
    reply = r.json()
    assert_literal(reply)
    assert reply["text"] == "slack:U123ALICE (&lt;!channel&gt;) is not on the list of approvers; nothing was decided."

"""Notifications under the controller's one transient policy, against real local receivers over HTTP.

Each channel (Slack incoming webhook, generic JSON webhook, Slack bot through the Web API) classifies an
answer once: no answer, 408, 429, 5xx and Slack's transient `ok: false` codes are retried within
REMEDIATOR_NOTIFY_BUDGET, never sooner than Retry-After (and exactly then); a Retry-After past what is left
of the budget fails the message at once with the reason; other 4xx and Slack's other codes fail after one
try. NOTIFY_ATTEMPTS, when set, still caps the calls. Notifications stay off the remediation's path.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.adapters.notifier import Channel, Message, open_channels
from remediator.errors import NotificationFailed, SlackApiError
from remediator.settings import Settings
from tests.approvals.harness import TOKEN, gated_controller
from tests.helpers import am_alert, am_payload, xid_labels
from tests.notify.receiver import receiver
from tests.notify.slack_api import Answer, fake_slack

MESSAGE = Message(event="message", title="GPU fault", text="Xid 79 on gpu-node-1")
KINDS = ("slack-webhook", "json-webhook", "slack-bot")
BOT_TOKEN = "xoxb-test-token"
SLACK_ERRORS = {429: "ratelimited", 500: None, 502: None, 503: None}


def bot_channel(http: httpx.AsyncClient, slack_api_url: str, **policy: Any) -> Channel:
    """The Slack bot channel (Web API chat.postMessage to #ops) at `slack_api_url`, with these retry settings."""
    chans, _ = open_channels(
        None, None, http, slack_bot_token=BOT_TOKEN, slack_channel="#ops", slack_api_url=slack_api_url, **policy
    )
    return chans[0]


@dataclass
class Peer:
    """One receiver of `kind` answering a script of (HTTP status, Retry-After) first, then success."""

    kind: str
    channel: Callable[..., Channel]
    arrivals: Callable[[], list[float]]
    answered: list[float]
    delivered: Callable[[], int]


@asynccontextmanager
async def peer(kind: str, script: list[tuple[int, float | None]]) -> AsyncIterator[Peer]:
    async with httpx.AsyncClient(timeout=5) as http:
        if kind == "slack-bot":
            answers = [Answer(status, SLACK_ERRORS.get(status), ra) for status, ra in script]
            async with fake_slack(script={"chat.postMessage": answers}) as slack:

                def bot(**policy: Any) -> Channel:
                    return bot_channel(http, slack.url, **policy)

                yield Peer(kind, bot, lambda: [c.at for c in slack.calls], slack.answered, lambda: len(slack.messages))
            return
        async with receiver(script=list(script)) as rec:

            def hook(**policy: Any) -> Channel:
                slack_url, json_url = (rec.url, None) if kind == "slack-webhook" else (None, rec.url)
                chans, _ = open_channels(slack_url, json_url, http, **policy)
                return chans[0]

            yield Peer(kind, hook, lambda: rec.times, rec.answered, lambda: len(rec.bodies))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_429_with_retry_after_2_is_delivered_once_and_not_sooner(kind: str) -> None:
    async with peer(kind, [(429, 2)]) as p:
        await p.channel().send(MESSAGE)  # the defaults: REMEDIATOR_NOTIFY_BUDGET's 10 minutes, no attempt cap
        arrivals = p.arrivals()
        assert len(arrivals) == 2 and p.delivered() == 1
        assert 2.0 <= arrivals[1] - p.answered[0] < 3.0  # exactly when asked: never sooner, not much later


@pytest.mark.parametrize("kind", KINDS)
async def test_a_retry_after_past_the_budget_fails_at_once_with_the_reason_and_no_early_resend(kind: str) -> None:
    async with peer(kind, [(429, 90)]) as p:
        started = time.monotonic()
        with pytest.raises(NotificationFailed) as failed:
            async with asyncio.timeout(5):
                await p.channel(budget_seconds=60).send(MESSAGE)
        assert time.monotonic() - started < 2  # at once, not after a shortened wait
        await asyncio.sleep(0.5)
        assert len(p.arrivals()) == 1 and p.delivered() == 0  # nothing re-sent early
    said = str(failed.value)
    assert "429" in said or "ratelimited" in said
    assert "transient; gave up after 1 attempt" in said
    assert "wait 90 s (Retry-After), past the 60 s budget" in said and "not asked sooner" in said


@pytest.mark.parametrize("kind", KINDS)
async def test_500_500_200_is_delivered(kind: str) -> None:
    async with peer(kind, [(500, None), (500, None)]) as p:
        await p.channel(backoff_seconds=0.01).send(MESSAGE)
        assert len(p.arrivals()) == 3 and p.delivered() == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_more_failures_than_the_old_attempt_count_are_ridden_out_within_the_budget(kind: str) -> None:
    async with peer(kind, [(503, None), (502, None), (500, None), (503, None), (500, None), (502, None)]) as p:
        await p.channel(backoff_seconds=0.01).send(MESSAGE)  # no NOTIFY_ATTEMPTS: only the budget bounds it
        assert len(p.arrivals()) == 7 and p.delivered() == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_notify_attempts_still_caps_the_calls_when_set(kind: str) -> None:
    async with peer(kind, [(500, None)] * 5) as p:
        with pytest.raises(NotificationFailed) as failed:
            await p.channel(attempts=3, backoff_seconds=0.01).send(MESSAGE)
        assert len(p.arrivals()) == 3 and p.delivered() == 0
    assert "gave up after 3 attempts: at most 3 attempts allowed" in str(failed.value)


async def test_the_budget_ends_the_retries_of_a_receiver_that_stays_down() -> None:
    async with peer("json-webhook", [(503, None)] * 1000) as p:
        started = time.monotonic()
        with pytest.raises(NotificationFailed) as failed:
            await p.channel(budget_seconds=1.0, backoff_seconds=0.05).send(MESSAGE)
        took = time.monotonic() - started
        arrivals = p.arrivals()
    assert took < 2.5 and len(arrivals) >= 3
    assert arrivals[-1] - p.answered[0] <= 1.0  # no request after the budget
    assert "the 1 s budget is spent" in str(failed.value)


async def test_retry_after_as_an_http_date_is_honoured() -> None:
    """Retry-After may be an HTTP-date: the next request comes no sooner than that moment."""
    async with receiver() as rec, httpx.AsyncClient(timeout=5) as http:
        wall_minus_loop = time.time() - asyncio.get_running_loop().time()
        not_before = int(time.time()) + 3
        rec.script.append((503, email.utils.formatdate(not_before, usegmt=True)))
        chans, _ = open_channels(None, rec.url, http)
        await chans[0].send(MESSAGE)
        assert len(rec.bodies) == 1 and rec.attempts == 2
    assert rec.times[1] + wall_minus_loop >= not_before - 0.05


@pytest.mark.parametrize("error", ["channel_not_found", "invalid_auth", "not_authed", "msg_too_long"])
async def test_a_permanent_slack_error_fails_after_one_try(error: str) -> None:
    async with fake_slack(script={"chat.postMessage": [Answer(200, error)]}) as slack, httpx.AsyncClient() as http:
        with pytest.raises(SlackApiError) as failed:
            await bot_channel(http, slack.url).send(MESSAGE)
        assert len(slack.calls) == 1
    assert failed.value.error == error and not failed.value.retryable
    assert str(failed.value) == f"slack: chat.postMessage: {error} (permanent; not retried)"


@pytest.mark.parametrize("status", [400, 403, 404, 410])
async def test_a_permanent_http_answer_fails_after_one_try(status: int) -> None:
    async with peer("slack-webhook", [(status, None)]) as p:
        with pytest.raises(NotificationFailed) as failed:
            await p.channel().send(MESSAGE)
        assert len(p.arrivals()) == 1
    assert str(failed.value).endswith("(permanent; not retried)") and f"HTTP {status}" in str(failed.value)


@pytest.mark.parametrize(
    "error", ["service_unavailable", "fatal_error", "internal_error", "request_timeout", "team_added_to_org"]
)
async def test_a_transient_slack_error_is_retried(error: str) -> None:
    async with fake_slack(script={"chat.postMessage": [Answer(200, error)]}) as slack, httpx.AsyncClient() as http:
        await bot_channel(http, slack.url, backoff_seconds=0.01).send(MESSAGE)
        assert len(slack.calls) == 2 and len(slack.messages) == 1


@pytest.mark.parametrize("status", [429, 200])
async def test_ok_false_ratelimited_is_retried_after_its_retry_after_each_time(status: int) -> None:
    """Slack's rate limit (`ok: false, error: ratelimited` with Retry-After; HTTP 429, or 200 as some
    gateways answer) five times in a row, more than the old four attempts: each re-send waits it out."""
    script = {"chat.postMessage": [Answer(status, "ratelimited", 1)] * 5}
    async with fake_slack(script=script) as slack, httpx.AsyncClient() as http:
        await bot_channel(http, slack.url).send(MESSAGE)
        sent = [c.at for c in slack.calls]
    assert len(sent) == 6 and len(slack.messages) == 1
    for answered, resent in zip(slack.answered, sent[1:], strict=True):
        assert 1.0 <= resent - answered < 1.8


def test_the_budget_setting_defaults_to_ten_minutes_and_is_bounded() -> None:
    settings = Settings()
    assert settings.notify_budget.total_seconds() == 600 and settings.notify_attempts is None
    assert Settings(notify_budget="90s").notify_budget.total_seconds() == 90
    with pytest.raises(ValueError, match="NOTIFY_BUDGET is at most 1d"):
        Settings(notify_budget="2d")
    with pytest.raises(ValueError, match="negative duration"):
        Settings(notify_budget=-1)


async def test_a_rate_limited_slack_never_holds_up_the_remediation(tmp_path: Path) -> None:
    """Slack asks the first post to wait 3 s: the alert becomes a remediation awaiting approval at once;
    the message lands after the wait, once, and nothing is recorded as failed."""
    script = {"chat.postMessage": [Answer(429, "ratelimited", 3)]}
    async with (
        fake_slack(script=script) as slack,
        gated_controller(
            tmp_path, slack_bot_token=BOT_TOKEN, slack_channel="#gpu-ops", slack_api_url=slack.url
        ) as gated,
    ):
        body = am_payload(am_alert(xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml")))
        started = time.monotonic()
        r = await gated.client.post("/api/v1/alerts", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200, r.text
        await gated.worker.drain_idle(timeout=30)
        rows = await gated.rt.repo.list_remediations()
        assert rows and rows[0].state == "awaiting_approval"
        assert time.monotonic() - started < 2.5  # the remediation did not wait for Slack's 3 s
        await slack.wait_until(lambda: len(slack.messages) == 1, limit=10)
        assert slack.of("chat.postMessage")[1].at - slack.answered[0] >= 3.0
        await gated.settle()
        audit = await gated.rt.repo.list_audit()
        assert not [e for e in audit if e.kind == "notification.failed"]

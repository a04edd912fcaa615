"""Slack and JSON webhook delivery against a real local receiver: content, retries, failures recorded."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest

from remediator.actions.base import ActionContext, Target
from remediator.actions.notify import Notify, NotifyParams
from remediator.adapters.notifier import Button, JsonWebhook, Message, PodLine, SlackWebhook
from remediator.engine.notifications import NotificationService
from remediator.errors import NotificationFailed
from remediator.settings import Settings
from tests.approvals.harness import CaptureChannel, gated_controller
from tests.notify.receiver import receiver

MESSAGE = Message(
    event="approval_requested",
    title="Approval needed: gated-drain on gpu-node-1",
    text="Step *drain* <needs> you",
    tone="warning",
    fields=(("Node", "gpu-node-1"), ("GPU", "#0 GPU-1")),
    pods=(PodLine("ml", "trainer-0", "Job/train → CronJob/nightly"),),
    buttons=(Button("Review and decide", url="http://127.0.0.1:9/approvals/abc", style="primary"),),
    remediation_id="r-1",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_slack_message_is_block_kit_with_pods_and_a_url_button() -> None:
    async with receiver() as rec, httpx.AsyncClient() as http:
        await SlackWebhook(rec.url, http).send(MESSAGE)
    body = rec.bodies[0]
    assert body["text"].startswith("Approval needed")
    blocks = body["blocks"]
    assert blocks[0]["type"] == "header"
    text = json.dumps(blocks)
    assert "trainer-0" in text and "Job/train" in text and "&lt;needs&gt;" in text
    button = next(b for blk in blocks if blk["type"] == "actions" for b in blk["elements"])
    assert button["url"] == "http://127.0.0.1:9/approvals/abc" and button["style"] == "primary"


async def test_json_webhook_body() -> None:
    async with receiver() as rec, httpx.AsyncClient() as http:
        await JsonWebhook(rec.url, http).send(MESSAGE)
    body = rec.bodies[0]
    assert body["event"] == "approval_requested" and body["remediation_id"] == "r-1"
    assert body["pods"] == [{"namespace": "ml", "name": "trainer-0", "owner": "Job/train → CronJob/nightly"}]
    assert body["links"] == [{"text": "Review and decide", "url": "http://127.0.0.1:9/approvals/abc"}]


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_retries_with_backoff_until_the_receiver_recovers(status: int) -> None:
    async with receiver(fail_first=2, fail_status=status) as rec, httpx.AsyncClient() as http:
        await SlackWebhook(rec.url, http, attempts=4, backoff_seconds=0.01).send(MESSAGE)
    assert rec.attempts == 3 and len(rec.bodies) == 1


async def test_gives_up_after_the_last_attempt() -> None:
    async with receiver(always_fail=True) as rec, httpx.AsyncClient() as http:
        with pytest.raises(NotificationFailed, match="HTTP 500"):
            await JsonWebhook(rec.url, http, attempts=3, backoff_seconds=0.01).send(MESSAGE)
    assert rec.attempts == 3


async def test_a_4xx_is_not_retried() -> None:
    async with receiver(always_fail=True, fail_status=404) as rec, httpx.AsyncClient() as http:
        with pytest.raises(NotificationFailed, match="HTTP 404"):
            await SlackWebhook(rec.url, http, attempts=4, backoff_seconds=0.01).send(MESSAGE)
    assert rec.attempts == 1


async def test_connection_refused_is_a_notification_failure() -> None:
    async with httpx.AsyncClient() as http:
        with pytest.raises(NotificationFailed, match="ConnectError"):
            await SlackWebhook(f"http://127.0.0.1:{free_port()}/x", http, attempts=2, backoff_seconds=0.01).send(
                MESSAGE
            )


async def test_failing_receiver_never_fails_a_remediation(tmp_path: Path) -> None:
    async with (
        receiver(always_fail=True) as rec,
        gated_controller(tmp_path, slack_webhook_url=rec.url, notify_attempts=2, notify_backoff="10ms") as gated,
    ):
        rem = await gated.fire()
        r = await gated.client.post(
            f"/api/v1/remediations/{rem.id}/approve", headers={"Authorization": "Bearer api-token"}
        )
        assert r.status_code == 200
        await gated.settle()
        assert await gated.state(rem.id) == "planned"  # plan-only
        failed = [e for e in await gated.rt.repo.list_audit() if e.kind == "notification.failed"]
        assert failed and {e.data["channel"] for e in failed} == {"slack"}
        assert {e.data["event"] for e in failed} >= {"approval_requested", "planned"}
        metrics = (await gated.client.get("/metrics")).text
        assert 'remediator_notifications_total{channel="slack",outcome="failed"}' in metrics
        assert 'remediator_notifications_total{channel="capture",outcome="sent"}' in metrics
    assert rec.attempts >= 2


async def test_configured_webhook_urls_receive_real_messages(tmp_path: Path) -> None:
    async with (
        receiver() as slack,
        receiver() as hook,
        gated_controller(tmp_path, slack_webhook_url=slack.url, notify_webhook_url=hook.url) as gated,
    ):
        assert gated.rt.notifier is not None
        assert [c.name for c in gated.rt.notifier.channels] == ["capture", "slack", "webhook"]
        rem = await gated.fire()
        await slack.wait_for(2)
        await hook.wait_for(2)
    approval = next(b for b in slack.bodies if "Approval needed" in b["text"])
    assert "trainer-0" in json.dumps(approval["blocks"])
    assert any(b["event"] == "approval_requested" and b["remediation_id"] == rem.id for b in hook.bodies)


async def test_repeated_held_events_are_sent_once(tmp_path: Path) -> None:
    capture = CaptureChannel()
    async with gated_controller(tmp_path) as gated:
        rem = await gated.fire()
        service = NotificationService([capture], gated.rt.repo, gated.rt.metrics, gated.settings)
        for _ in range(3):
            await service.remediation_event(rem.id, "held", "circuit breaker: 10 of 10 nodes")
        await service.remediation_event(rem.id, "held", "rate limit")
        await service.aclose()
    assert [m.text.splitlines()[-1] for m in capture.messages] == [
        "circuit breaker: 10 of 10 nodes",
        "rate limit",
    ]


async def test_notify_action_queues_a_message_and_never_fails() -> None:
    capture = CaptureChannel()
    settings = Settings(database_url="sqlite+aiosqlite:///:memory:")
    ctx = ActionContext(
        remediation_id="r-9",
        step_name="tell",
        target=Target(kind="node", node="n1"),
        settings=settings,
        dry_run=False,
        alert={"name": "GPUXidError"},
    )
    action = Notify()
    params = action.parse({"message": "node n1 drained", "channel": "#gpu-ops"})
    assert isinstance(params, NotifyParams) and not action.mutating
    result = await action.run(ctx, params)
    assert result.output == {"sent": False}
    ctx.notifier = NotificationService([capture], None, None, settings)  # type: ignore[arg-type]
    result = await action.run(ctx, params)
    assert result.output["sent"] is True and not result.changed
    await ctx.notifier.aclose()  # type: ignore[attr-defined]
    assert capture.messages[0].channel == "#gpu-ops" and capture.messages[0].text == "node n1 drained"
    assert "notify #gpu-ops" in action.describe(ctx.target, params)

"""Acceptance in a real browser: Slack message -> approval page in Chromium -> Approve -> `succeeded`.

The controller runs under uvicorn on 127.0.0.1 (plan-only, its own worker), Slack is a local receiver, and
Playwright drives Debian's Chromium (never a downloaded browser).
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.engine.runtime import Runtime
from tests.approvals.harness import TOKEN, settings_for
from tests.helpers import am_alert, am_payload, xid_labels
from tests.notify.receiver import Receiver, receiver
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller

SLACKBOT = "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"

pytestmark = [pytest.mark.browser]


def serve(tmp_path: Path, slack_url: str) -> AbstractAsyncContextManager[tuple[str, Runtime]]:
    return live_controller(lambda base: settings_for(tmp_path, public_url=base, slack_webhook_url=slack_url))


def approval_url(slack: Receiver) -> str:
    for body in slack.bodies:
        for block in body.get("blocks", []):
            for element in block.get("elements", []) if block.get("type") == "actions" else []:
                if "/approvals/" in str(element.get("url")):
                    return str(element["url"])
    raise AssertionError(f"no approval button in {slack.bodies!r}")


async def wait_for_state(rt: Runtime, rem_id: str, state: str) -> None:
    async with asyncio.timeout(30):
        while (rem := await rt.repo.get(rem_id)) is None or rem.state != state:
            await asyncio.sleep(0.05)


async def test_slack_link_opens_in_chromium_and_approve_runs_the_playbook(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    async with receiver() as slack, serve(tmp_path, slack.url) as (base, rt):
        body = am_payload(am_alert(xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml")))
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
            assert (await api.post("/api/v1/alerts", json=body)).status_code == 200
            async with asyncio.timeout(30):
                while not any("Approval needed" in b.get("text", "") for b in slack.bodies):
                    await slack.wait_for(len(slack.bodies) + 1)
            link = approval_url(slack)
            assert link.startswith(f"{base}/approvals/")
            rem_id = (await api.get("/api/v1/remediations")).json()[0]["id"]
            await wait_for_state(rt, rem_id, "awaiting_approval")

            audit_before = (await api.get("/api/v1/audit")).json()
            unfurl = await api.get(link, headers={"User-Agent": SLACKBOT})
            assert unfurl.status_code == 200 and "trainer-0" in unfurl.text
            assert (await api.get("/api/v1/audit")).json() == audit_before
            assert (await api.get(f"/api/v1/remediations/{rem_id}")).json()["state"] == "awaiting_approval"

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
                )
                try:
                    page = await browser.new_page(viewport={"width": 390, "height": 844})
                    response = await page.goto(link)
                    assert response is not None and response.status == 200
                    assert await page.locator("tr.pod", has_text="trainer-0").count() == 1
                    assert await page.locator("#status").inner_text() == "pending"
                    await page.fill("#name", "Alice Browser")
                    await page.click("#approve")
                    await page.wait_for_selector("#notice")
                    assert "approved by Alice Browser" in await page.locator("#notice").inner_text()
                    await wait_for_state(rt, rem_id, "planned")
                    await page.goto(f"{base}/remediations/{rem_id}")
                    assert await page.locator("#state").inner_text() == "planned"  # plan-only: nothing changed
                finally:
                    await browser.close()

            audit: list[dict[str, Any]] = (await api.get(f"/api/v1/audit?remediation={rem_id}")).json()
            approved = [
                e for e in audit if e["kind"] == "state.running" and e["data"].get("source") == "page"
            ]
            assert approved and approved[0]["actor"] == "Alice Browser"
            async with asyncio.timeout(20):
                while not any("Remediation planned" in b.get("text", "") for b in slack.bodies):
                    await slack.wait_for(len(slack.bodies) + 1)


async def test_beyond_loopback_chromium_signs_in_with_a_ui_token_and_approves(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    token = "alice-browser-token-0123456789"
    with_tokens = live_controller(
        lambda base: settings_for(tmp_path, public_url=base, ui_tokens=[f"Alice Browser:{token}"]),
        listen_host="0.0.0.0",
    )
    async with with_tokens as (base, rt):
        body = am_payload(am_alert(xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml")))
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
            assert (await api.post("/api/v1/alerts", json=body)).status_code == 200
            async with asyncio.timeout(30):
                while not (listed := (await api.get("/api/v1/remediations")).json()):
                    await asyncio.sleep(0.05)
            rem_id = listed[0]["id"]
            await wait_for_state(rt, rem_id, "awaiting_approval")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page()
                await page.goto(f"{base}/remediations/{rem_id}")
                assert page.url == f"{base}/login?next=/remediations/{rem_id}"
                assert "trainer-0" not in await page.content()
                await page.fill("#account", "Alice Browser")
                await page.fill("#token", token)
                await page.click("#sign-in")
                await page.wait_for_url(f"{base}/remediations/{rem_id}")
                assert await page.locator("#name").count() == 0
                await page.click("#act-approve")
                assert "Approve step drain" in await page.locator("#what").inner_text()
                await page.click("#confirm-move")
                await page.wait_for_url(f"{base}/remediations/{rem_id}?done=approve")
                await wait_for_state(rt, rem_id, "planned")  # plan-only
                cookies = {c["name"]: c for c in await page.context.cookies()}
                session = cookies["remediator_session"]
                assert session["httpOnly"] is True and session["sameSite"] == "Strict"
            finally:
                await browser.close()
        (approval,) = await rt.repo.approvals_of(rem_id)
        assert approval.decided_by == "Alice Browser" and approval.decision_source == "ui"

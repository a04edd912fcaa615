"""The silences page in Chromium: refused without a session, then created and expired by a signed-in person
through the confirmation step, with the state and the audit rows checked through the API.

The controller runs under uvicorn on 127.0.0.1 (plan-only) with a UI token, on loopback, where the pages are
open but silences are changed only under a signed-in person. Playwright drives Debian's Chromium.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.approvals.harness import settings_for
from tests.ui.browser_helpers import AUTH, PERSON, UI_TOKEN, assert_refused_without_session, audit_of, sign_in
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller

pytestmark = [pytest.mark.browser]


async def silences(api: httpx.AsyncClient) -> list[dict[str, Any]]:
    r = await api.get("/api/v1/silences")
    assert r.status_code == 200, r.text
    return list(r.json())


@pytest.mark.timeout(180)
async def test_a_signed_in_person_creates_and_expires_a_silence_and_nobody_else_can(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    serving = live_controller(
        lambda base: settings_for(tmp_path, public_url=base, ui_tokens=[f"{PERSON}:{UI_TOKEN}"])
    )
    async with serving as (base, _rt), httpx.AsyncClient(base_url=base, headers=AUTH) as api, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            # Without a session: the page says so, and submitting the form changes nothing.
            await page.goto(f"{base}/silences")
            assert await page.locator("#sign-in-needed").count() == 1
            await page.fill("#matchers", 'alertname=GPUXidError\nHostname=~"gpu-node-1[0-9]"')
            await page.fill("#duration", "2h")
            await page.fill("#comment", "rack 4 maintenance")
            async with page.expect_navigation() as nav:
                await page.click("#create")
            await assert_refused_without_session(page, nav)
            assert await silences(api) == []

            # Signed in: the confirmation says what will happen, then the silence is created.
            await sign_in(page, base, "/silences")
            await page.fill("#matchers", 'alertname=GPUXidError\nHostname=~"gpu-node-1[0-9]"')
            await page.fill("#duration", "2h")
            await page.fill("#comment", "rack 4 maintenance")
            await page.click("#create")
            what = await page.locator("#what").inner_text()
            assert "will be recorded as silenced and start no remediation" in what and "2h" in what
            assert await silences(api) == []  # nothing yet: only the confirmation
            await page.click("#confirm-create")
            await page.wait_for_url(f"{base}/silences?done=created")
            (created,) = await silences(api)
            assert created["status"]["state"] == "active"
            assert created["createdBy"] == "Alice Browser" and created["actor"] == "Alice Browser"
            assert created["comment"] == "rack 4 maintenance"
            assert [(m["name"], m["value"], m["isRegex"], m["isEqual"]) for m in created["matchers"]] == [
                ("alertname", "GPUXidError", False, True), ("Hostname", "gpu-node-1[0-9]", True, True),
            ]
            row = page.locator(f"tr.silence[data-silence='{created['id']}']")
            assert await row.get_attribute("data-state") == "active"
            (event,) = await audit_of(api, "silence.created")
            assert event["actor"] == "Alice Browser" and event["data"]["comment"] == "rack 4 maintenance"

            # Expire: confirmation first, then the silence ends and is kept.
            await row.locator("button.expire").click()
            assert "ends now" in await page.locator("#what").inner_text()
            assert (await silences(api))[0]["status"]["state"] == "active"
            await page.click("#confirm-expire")
            await page.wait_for_url(f"{base}/silences?done=expired")
            (expired,) = await silences(api)
            assert expired["status"]["state"] == "expired" and expired["expiredBy"] == "Alice Browser"
            assert await page.locator(f"tr.silence[data-silence='{created['id']}']").get_attribute(
                "data-state") == "expired"
            (event,) = await audit_of(api, "silence.expired")
            assert event["actor"] == "Alice Browser" and event["data"]["silence_id"] == created["id"]
        finally:
            await browser.close()

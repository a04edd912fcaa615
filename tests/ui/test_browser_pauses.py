"""Pause and resume from the fleet page in Chromium: refused without a session; a signed-in person creates a
scoped, timed pause through the confirmation (which says exactly what will happen), sees it in the banner, and
resumes it from there, with the pause's state and the audit rows checked through the API.

The controller runs under uvicorn on 127.0.0.1 (plan-only) with a UI token, on loopback, where the pages are
open but pauses are changed only under a signed-in person. Playwright drives Debian's Chromium.
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


async def pauses(api: httpx.AsyncClient, *, all: bool = False) -> list[dict[str, Any]]:
    r = await api.get("/api/v1/pauses", params={"all": "true"} if all else {})
    assert r.status_code == 200, r.text
    return list(r.json())


@pytest.mark.timeout(180)
async def test_a_signed_in_person_pauses_a_scope_and_resumes_it_and_nobody_else_can(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    serving = live_controller(
        lambda base: settings_for(tmp_path, public_url=base, ui_tokens=[f"{PERSON}:{UI_TOKEN}"])
    )
    async with serving as (base, _rt), httpx.AsyncClient(base_url=base, headers=AUTH) as api, async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()

            async def fill_pause() -> None:
                await page.check("#scope-some")
                await page.fill("#selector", "rack=r12")
                await page.fill("#for", "2h")
                await page.fill("#reason", "rack r12 firmware")
                await page.click("#review-pause")

            # Without a session: the form says so, and submitting it changes nothing.
            await page.goto(f"{base}/fleet")
            async with page.expect_navigation():
                await page.click("#new-pause-link")
            assert await page.locator("#sign-in-needed").count() == 1
            async with page.expect_navigation() as nav:
                await fill_pause()
            await assert_refused_without_session(page, nav)
            assert await pauses(api, all=True) == []

            # Signed in: the confirmation says what will happen, then the pause is created.
            await sign_in(page, base, "/fleet/pause")
            await fill_pause()
            what = await page.locator("#what").inner_text()
            assert what.startswith("Hold new steps on nodes matching rack=r12 for 2h (until "), what
            assert "no step that changes a node or a GPU starts there" in what
            details = await page.locator("#what-details").inner_text()
            assert "as done by Alice Browser, with the reason: rack r12 firmware" in details
            assert await pauses(api) == []  # nothing yet: only the confirmation
            await page.click("#confirm-pause")
            await page.wait_for_url(f"{base}/fleet")
            (made,) = await pauses(api)
            assert made["created_by"] == "Alice Browser" and made["reason"] == "rack r12 firmware"
            assert made["scope"] == {"all": False, "nodes": [], "selector": "rack=r12", "playbooks": []}
            assert made["active"] and made["until"]
            (event,) = await audit_of(api, "pause.created")
            assert event["actor"] == "Alice Browser" and event["data"]["id"] == made["id"]

            # The banner shows who, why, the scope and the end; never "Paused by api".
            banner = page.locator(f".banner-pause[data-pause='{made['id']}']")
            shown = await banner.inner_text()
            assert shown.startswith("Paused on nodes matching rack=r12 by Alice Browser: rack r12 firmware, until ")
            assert "UTC" in shown and "Paused by api" not in await page.locator("main").inner_text()

            # Another browser without a session cannot resume it.
            stranger = await browser.new_page()
            refused = await stranger.goto(f"{base}/fleet/pauses/{made['id']}/resume")
            assert refused is not None and refused.status == 403
            await stranger.close()
            assert [p["id"] for p in await pauses(api)] == [made["id"]]

            # Resume from the banner: the confirmation first, then the pause ends, kept with who ended it.
            async with page.expect_navigation():
                await banner.locator("a").click()
            assert "End the pause on nodes matching rack=r12 (by Alice Browser: rack r12 firmware" in (
                await page.locator("#what").inner_text())
            assert len(await pauses(api)) == 1
            await page.fill("#reason", "firmware done")
            await page.click("#confirm-resume")
            await page.wait_for_url(f"{base}/fleet")
            assert await pauses(api) == []
            (ended,) = await pauses(api, all=True)
            assert ended["ended_by"] == "Alice Browser" and not ended["active"]
            (event,) = await audit_of(api, "pause.ended")
            assert event["actor"] == "Alice Browser" and event["data"]["resume_reason"] == "firmware done"
            assert await page.locator(".banner-pause").count() == 0
            assert await page.locator("#pause-controls").inner_text() != ""
        finally:
            await browser.close()

"""In Chromium: index -> fleet view -> a remediation -> its approval page -> approve -> "why did nothing
happen?" lists the same hot GPU, alerting again inside its rule's cooldown, with the cooldown's end time.

Screenshots of each page go to the test's temporary directory (never the repository).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, timedelta
from pathlib import Path

import httpx
import pytest

from tests.approvals.harness import TOKEN, settings_for
from tests.helpers import am_alert, am_payload
from tests.notify.receiver import receiver
from tests.ui.browser_helpers import approval_requested
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller
from tests.ui.test_browser import wait_for_state
from tests.ui.views_defs import hot_labels, views_defs

pytestmark = [pytest.mark.browser]


async def test_walk_from_index_through_fleet_and_approval_to_why_nothing_happened(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    shots = tmp_path / "screenshots"
    shots.mkdir()
    defs = views_defs(tmp_path)
    async with receiver() as slack, live_controller(
        lambda base: settings_for(tmp_path, public_url=base, slack_webhook_url=slack.url, **defs)
    ) as (base, rt):
        api = httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"})
        async with api:
            first = am_alert(hot_labels(), starts_at="2026-12-02T10:00:00Z")
            link, rem_id = await approval_requested(api, slack, rt, first)

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
                try:
                    page = await browser.new_page(viewport={"width": 1100, "height": 900})
                    await page.goto(f"{base}/?refresh=0")
                    assert await page.locator('nav a[aria-current="page"]').inner_text() == "Remediations"
                    row = page.locator(f'tr.rem:has(a[href="/remediations/{rem_id}"])')
                    assert "critical" in await row.inner_text()
                    await page.screenshot(path=str(shots / "1-index.png"), full_page=True)

                    await page.click('nav a[href="/fleet"]')
                    await page.wait_for_url(f"{base}/fleet")
                    assert await page.locator('nav a[aria-current="page"]').inner_text() == "Fleet"
                    assert await page.locator("#quarantines-allowed").inner_text() == "9 more quarantines allowed"
                    assert (await page.locator("#count-awaiting .n").inner_text()) == "1"
                    node = page.locator('tr.node[data-node="gpu-node-7"]')
                    assert "awaiting approval" in await node.inner_text()
                    await page.screenshot(path=str(shots / "2-fleet.png"), full_page=True)

                    await node.locator(f'a[href="/remediations/{rem_id}"]').click()
                    await page.wait_for_url(f"{base}/remediations/{rem_id}")
                    assert await page.locator("#state").inner_text() == "awaiting_approval"
                    assert await page.locator("#severity").inner_text() == "critical"
                    await page.screenshot(path=str(shots / "3-remediation.png"), full_page=True)

                    response = await page.goto(link)
                    assert response is not None and response.status == 200
                    assert await page.locator("#status").inner_text() == "pending"
                    assert "template error" not in await page.content()
                    await page.fill("#name", "Alice Browser")  # loopback without sign-in: the typed name
                    await page.click("#approve")
                    await page.wait_for_selector("#notice")
                    assert "approved by Alice Browser" in await page.locator("#notice").inner_text()
                    await page.screenshot(path=str(shots / "4-approved.png"), full_page=True)
                    await wait_for_state(rt, rem_id, "planned")

                    again = am_payload(am_alert(hot_labels(), starts_at="2026-12-02T11:00:00Z"))
                    assert (await api.post("/api/v1/alerts", json=again)).status_code == 200
                    async with asyncio.timeout(30):
                        while not (await api.get("/api/v1/alerts/unacted")).json():
                            await asyncio.sleep(0.05)

                    await page.goto(f"{base}/remediations/{rem_id}")
                    assert await page.locator("#state").inner_text() == "planned"  # plan-only: nothing changed
                    await page.click('nav a[href="/alerts/ignored"]')
                    await page.wait_for_url(f"{base}/alerts/ignored")
                    row = page.locator('tr.unacted[data-reason="cooldown"]')
                    assert await row.count() == 1
                    text = await row.inner_text()
                    rem = await rt.repo.get(rem_id)
                    assert rem is not None and rem.finished_at is not None
                    end = rem.finished_at.replace(tzinfo=UTC) + timedelta(hours=1)
                    assert "gpu-node-7" in text and "cooldown ends" in text
                    assert end.strftime("%Y-%m-%d %H:%M:%S") + " UTC+00:00" in text
                    assert await row.locator(f'a[href="/remediations/{rem_id}"]').count() == 1
                    await page.screenshot(path=str(shots / "5-why.png"), full_page=True)
                finally:
                    await browser.close()
    assert len(list(shots.glob("*.png"))) == 5

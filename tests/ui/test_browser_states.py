"""In Chromium, the pages use the API's and the CLI's names: a plan-only remediation reads `planned` on the
list (also through its state filter) and on its page, and an approval request's badge reads `pending`, then
`approved` once decided (never `open` or `decided`, the pages' own words before), on the approval page and in
the remediation page's approval requests.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.approvals.harness import TOKEN, settings_for
from tests.helpers import am_alert, xid_labels
from tests.notify.receiver import receiver
from tests.ui.browser_helpers import approval_requested
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller
from tests.ui.test_browser import wait_for_state

pytestmark = [pytest.mark.browser]

# Words of the old vocabulary that no badge may show any more.
OLD_WORDS = re.compile(r"^\s*(open|decided|succeeded)\s*$")


async def test_planned_on_list_and_detail_and_the_approval_badge_pending_then_approved(tmp_path: Path) -> None:
    from playwright.async_api import Page, async_playwright

    async def no_old_badge(page: Page) -> None:
        assert await page.locator(".badge", has_text=OLD_WORDS).count() == 0, await page.content()

    async with receiver() as slack, live_controller(
        lambda base: settings_for(tmp_path, public_url=base, slack_webhook_url=slack.url)
    ) as (base, rt), httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        alert = am_alert(xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml"))
        link, rem_id = await approval_requested(api, slack, rt, alert)

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1100, "height": 900})
                response = await page.goto(link)
                assert response is not None and response.status == 200
                status = page.locator("#status")
                assert await status.inner_text() == "pending"
                assert "state-pending" in (await status.get_attribute("class") or "")
                await page.goto(f"{base}/remediations/{rem_id}")
                assert await page.locator("td.approval-status").all_inner_texts() == ["pending"]

                await page.goto(link)
                await page.fill("#name", "Alice Browser")  # loopback without sign-in: the typed name
                await page.click("#approve")
                await page.wait_for_selector("#notice")
                assert await page.locator("#status").inner_text() == "approved"
                await no_old_badge(page)
                await wait_for_state(rt, rem_id, "planned")
                await page.goto(link)
                assert await page.locator("#status").inner_text() == "approved"
                assert await page.locator("#decided-by").inner_text() == "Alice Browser"
                await no_old_badge(page)

                await page.goto(f"{base}/?refresh=0")
                row = page.locator(f'tr.rem:has(a[href="/remediations/{rem_id}"])')
                assert await row.get_attribute("data-state") == "planned"
                assert await row.locator(".badge").first.inner_text() == "planned"
                await no_old_badge(page)
                await page.select_option("#state", "planned")  # the filter offers the state it shows
                await page.click("form.filters button[type=submit]")
                await page.wait_for_url(re.compile(r".*[?&]state=planned(&|$)"))
                assert await page.locator("tr.rem").count() == 1
                assert "Unknown state" not in await page.content()
                await page.goto(f"{base}/?state=succeeded&refresh=0")
                assert await page.locator("tr.rem").count() == 0

                await page.goto(f"{base}/remediations/{rem_id}")
                assert await page.locator("#state").inner_text() == "planned"
                assert await page.locator("td.approval-status").all_inner_texts() == ["approved"]
                await no_old_badge(page)
            finally:
                await browser.close()
        assert (await api.get(f"/api/v1/remediations/{rem_id}")).json()["state"] == "planned"

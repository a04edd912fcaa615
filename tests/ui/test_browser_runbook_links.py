"""In Chromium, a remediation's state badge (its page, the list, the fleet page and the effectiveness report)
links to that state's runbook section in docs/operations.md, served rendered by the controller at
/docs/operations.md (REMEDIATOR_DOCS_URL's default, usable offline), and the link lands on the section's
heading; REMEDIATOR_DOCS_URL moves the links elsewhere."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from remediator.engine.runtime import Runtime
from tests.approvals.harness import TOKEN, settings_for
from tests.effectiveness.test_surfaces import LADDER, H, remediation, store
from tests.helpers import am_alert, am_payload, xid_labels
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller
from tests.ui.test_browser import wait_for_state

pytestmark = [pytest.mark.browser]


async def awaiting_approval(api: httpx.AsyncClient, rt: Runtime) -> str:
    """Post the Xid 79 alert whose step needs approval; the ID of the remediation it starts, once that awaits
    approval."""
    body = am_payload(am_alert(xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml")))
    assert (await api.post("/api/v1/alerts", json=body)).status_code == 200
    for _ in range(300):
        listed = (await api.get("/api/v1/remediations")).json()
        if listed:
            break
    rem_id = str(listed[0]["id"])
    await wait_for_state(rt, rem_id, "awaiting_approval")
    return rem_id

async def test_state_badges_link_to_their_runbook_section(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    async with live_controller(lambda base: settings_for(tmp_path, public_url=base)) as (base, rt), \
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        rem_id = await awaiting_approval(api, rt)

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1100, "height": 900})
                await page.goto(f"{base}/")
                listed_link = page.locator("a.state-link", has_text="awaiting_approval").first
                assert await listed_link.get_attribute("href") == "/docs/operations.md#state-awaiting_approval"
                await page.goto(f"{base}/remediations/{rem_id}")
                await page.locator("a.state-link:has(#state)").click()
                await page.wait_for_url(f"{base}/docs/operations.md#state-awaiting_approval")
                heading = page.locator("#state-awaiting_approval")
                assert await heading.evaluate("e => e.tagName") == "H3"
                assert await heading.inner_text() == "State: awaiting_approval"
                assert "approval" in await heading.evaluate("e => e.nextElementSibling.textContent")
                for state in ("planned", "returned", "released", "waiting-on-a-dependency"):
                    assert await page.locator(f"#state-{state}").count() == 1, state
            finally:
                await browser.close()
        missing = await api.get("/docs/nope.md")
        assert missing.status_code == 404


async def test_docs_url_setting_moves_the_links(tmp_path: Path) -> None:
    elsewhere = "https://git.example.internal/gpu-remediator/blob/main/docs"
    async with live_controller(lambda base: settings_for(tmp_path, public_url=base, docs_url=elsewhere)) as (
        base, rt,
    ), httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        rem_id = await awaiting_approval(api, rt)
        page = (await api.get(f"/remediations/{rem_id}")).text
        assert f'href="{elsewhere}/operations.md#state-awaiting_approval"' in page


async def test_fleet_and_effectiveness_badges_link_to_their_runbook_section(tmp_path: Path) -> None:
    """The fleet page (a node's remediations) and the effectiveness report (the escalation ladder's table)
    link their state badges to the runbook as the list and detail pages do."""
    from playwright.async_api import async_playwright

    async with live_controller(lambda base: settings_for(tmp_path, public_url=base)) as (base, rt), \
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        await awaiting_approval(api, rt)
        # A GPU escalated from a reset to a reboot, both finished: rung 2 of the ladder on the report.
        escalation = {"from": "b1", "reason": "gate_failed", "rung": 2, "ladder": LADDER,
                      "recurrence_seconds": None, "history": [], "gate": None}
        await store(rt.repo, [
            remediation("b1", 3 * H, 3 * H, state="failed", gpu="GPU-b", xid=48),
            remediation("b2", 2 * H, H, state="failed", playbook="reboot-node", gpu="GPU-b", xid=48,
                        escalation=escalation),
        ])

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1100, "height": 900})
                await page.goto(f"{base}/fleet")
                row = page.locator("tr", has_text="gpu-node-1").first
                fleet_link = row.locator("a.state-link", has_text="awaiting_approval")
                assert await fleet_link.get_attribute("href") == "/docs/operations.md#state-awaiting_approval"
                await fleet_link.click()
                await page.wait_for_url(f"{base}/docs/operations.md#state-awaiting_approval")
                assert await page.locator("#state-awaiting_approval").inner_text() == "State: awaiting_approval"

                await page.goto(f"{base}/reports/effectiveness")
                rung = page.locator('#rungs tr[data-subject="GPU-b"] a.state-link')
                assert await rung.get_attribute("href") == "/docs/operations.md#state-failed"
                assert await rung.inner_text() == "failed"
                await rung.click()
                await page.wait_for_url(f"{base}/docs/operations.md#state-failed")
                heading = page.locator("#state-failed")
                assert await heading.evaluate("e => e.tagName") == "H3"
                assert await heading.inner_text() == "State: failed"
            finally:
                await browser.close()

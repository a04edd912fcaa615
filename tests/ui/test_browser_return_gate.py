"""In Chromium: the remediation page says what must happen before the node returns (a new boot, then which GPU
checks) from the moment it is quarantined, and does not say Finished while the return runs; the approval page
asks "Approve step ...?" only while the request is open, and afterwards says it was decided, by whom and when.

Screenshots go to the test's temporary directory (never the repository).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from remediator.adapters.kube import KubeAdapter
from remediator.settings import Settings
from tests.approvals.harness import TOKEN, settings_for
from tests.engine.test_pipeline import gpu_node
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels
from tests.notify.receiver import receiver
from tests.ui.browser_helpers import approval_requested
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller
from tests.ui.test_browser import wait_for_state

pytestmark = [pytest.mark.browser]


async def test_the_page_shows_the_gate_before_the_return_and_no_finished_while_reverting(
    tmp_path: Path, fake_kube: FakeKube, kube_adapter: KubeAdapter,
) -> None:
    from playwright.async_api import async_playwright

    gpu_node(fake_kube, "gpu-1")

    def settings(base: str) -> Settings:
        return Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", webhook_token=[TOKEN],
                        public_url=base, secret_key="test-secret-key",
                        worker_poll_interval=0.05)  # type: ignore[arg-type]

    labels = xid_labels("gpu-1", 79)
    async with live_controller(settings, kube=kube_adapter) as (base, rt), \
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api, \
            async_playwright() as pw:
        assert (await api.post("/api/v1/alerts", json=am_payload(am_alert(labels)))).is_success
        async with asyncio.timeout(30):
            while not (rows := (await api.get("/api/v1/remediations")).json()) or rows[0]["state"] != "succeeded":
                await asyncio.sleep(0.05)
        rem_id = rows[0]["id"]
        boot = (await api.get(f"/api/v1/remediations/{rem_id}")).json()["context"]["node"]["boot_id"]
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 900})
            await page.goto(f"{base}/remediations/{rem_id}")
            gate = page.locator("#return-gate li.gate-step")
            assert await gate.count() == 2
            reboot, validate = gate.nth(0), gate.nth(1)
            assert await reboot.get_attribute("data-kind") == "reboot"
            assert f"a boot ID other than {boot}" in await reboot.inner_text()
            assert await validate.get_attribute("data-kind") == "validation"
            assert "DCGM diagnostic level 2" in await validate.inner_text()
            assert await page.locator("#finished").count() == 1  # succeeded: it finished
            await page.screenshot(path=str(tmp_path / "quarantined.png"), full_page=True)

            # The alert resolves: the return waits at the reboot; the page does not say Finished.
            resolved = am_payload(am_alert(labels, status="resolved"))
            assert (await api.post("/api/v1/alerts", json=resolved)).is_success
            await wait_for_state(rt, rem_id, "reverting")
            async with asyncio.timeout(30):
                while not (await api.get(f"/api/v1/remediations/{rem_id}")).json()["return_gate"][0]["status"]:
                    await asyncio.sleep(0.05)
            await page.goto(f"{base}/remediations/{rem_id}")
            assert await page.locator("#state").inner_text() == "reverting"
            assert await page.locator("#finished").count() == 0
            assert "Finished" not in await page.locator("table.kv").first.inner_text()
            assert "running" in await page.locator("#return-gate li.gate-step").nth(0).inner_text()
            await page.screenshot(path=str(tmp_path / "reverting.png"), full_page=True)
        finally:
            await browser.close()


async def test_the_approval_page_after_its_decision_says_decided_by_whom_and_when(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    async with receiver() as slack, live_controller(
        lambda base: settings_for(tmp_path, public_url=base, slack_webhook_url=slack.url)
    ) as (base, rt), httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        alert = am_alert(xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml"))
        link, rem_id = await approval_requested(api, slack, rt, alert)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1100, "height": 900})
                await page.goto(link)
                assert (await page.locator("h1").inner_text()).startswith("Approve step")
                assert await page.locator("#return-gate").count() == 1
                decided = await api.post(f"/api/v1/remediations/{rem_id}/approve",
                                         json={"by": "alice", "comment": "checked"})
                assert decided.status_code == 200, decided.text

                await page.goto(link)
                await page.screenshot(path=str(tmp_path / "decided.png"), full_page=True)
                heading = await page.locator("h1").inner_text()
                assert not heading.startswith("Approve") and "approved" in heading
                assert not (await page.title()).startswith("Approve")
                line = await page.locator("#decided-line").inner_text()
                assert line.startswith("Decided by api:alice at ") and "UTC" in line and "via api" in line
                assert await page.locator("#approve").count() == 0
            finally:
                await browser.close()

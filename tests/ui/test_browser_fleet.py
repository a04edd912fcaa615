"""In Chromium, against a controller on a (fake-apiserver) fleet of three GPU nodes: the fleet page shows every
GPU node with its GPUs' health, quarantine as the node's taint says (also one no remediation of this store
holds), the breaker's room against three nodes rather than "8 of 10", no node made up from an `instance`
label, and who paused and why.

Screenshots go to the test's temporary directory (never the repository).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from remediator.adapters.kube import KubeAdapter
from remediator.settings import Settings
from tests.engine.test_pipeline import gpu_node
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller

pytestmark = [pytest.mark.browser]

TOKEN = "fleet-token"
TAINT = {"key": "remediator.io/gpu-unhealthy", "value": "xid-48", "effect": "NoSchedule"}


async def test_the_fleet_page_tells_the_truth(tmp_path: Path, fake_kube: FakeKube, kube_adapter: KubeAdapter) -> None:
    from playwright.async_api import async_playwright

    gpu_node(fake_kube, "gpu-1")
    fake_kube.add_node("gpu-2", labels={"nvidia.com/gpu.present": "true"}, taints=[TAINT], unschedulable=True)
    fake_kube.add_node("gpu-3", labels={"nvidia.com/gpu.present": "true"})

    def settings(base: str) -> Settings:
        return Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", webhook_token=[TOKEN],
                        public_url=base, secret_key="test-secret-key",
                        worker_poll_interval=0.05)  # type: ignore[arg-type]

    async with live_controller(settings, kube=kube_adapter) as (base, rt), \
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}) as api, \
            async_playwright() as pw:
        assert (await api.post("/api/v1/alerts", json=am_payload(am_alert(xid_labels("gpu-1", 79))))).is_success
        stray = {k: v for k, v in xid_labels("x", 79, uuid="GPU-0000-stray").items() if k != "Hostname"}
        assert (await api.post("/api/v1/alerts", json=am_payload(am_alert({**stray, "instance": "127.0.0.250:9400"}))
                               )).is_success
        async with asyncio.timeout(30):  # gpu-1 quarantined by the controller, as the node shows it
            while not any(t["key"] == TAINT["key"] for t in (fake_kube.node("gpu-1") or {})["spec"].get("taints", [])):
                await asyncio.sleep(0.05)
        async with asyncio.timeout(30):
            while not (rt.inventory is not None and (f := rt.inventory.get("gpu-1")) and f.tainted(TAINT["key"])):
                await asyncio.sleep(0.05)
        paused = await api.post("/api/v1/pause", json={"reason": "rack 7 power work", "by": "erin"})
        assert paused.status_code == 200, paused.text

        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 900})
            await page.goto(f"{base}/fleet")
            await page.screenshot(path=str(tmp_path / "fleet.png"), full_page=True)
            rows = page.locator("tr.node")
            assert sorted(await rows.evaluate_all("rs => rs.map(r => r.dataset.node)")) == ["gpu-1", "gpu-2", "gpu-3"]
            # Three GPU nodes, one counted by the breaker: 2 more quarantines at most (not "9 of 10").
            assert await page.locator("#quarantines-allowed").inner_text() == "2 more quarantines allowed"
            assert "more than the 3 GPU nodes the fleet has" in await page.locator("#breaker-limit").inner_text()
            assert await page.locator("#count-quarantined .n").inner_text() == "2"
            for name in ("gpu-1", "gpu-2"):
                row = page.locator(f'tr.node[data-node="{name}"]')
                assert "quarantined" in await row.locator("td").nth(1).inner_text()
                assert "tainted remediator.io/gpu-unhealthy=" in await row.locator("td.gpus").inner_text()
            healthy = page.locator('tr.node[data-node="gpu-3"]')
            assert await healthy.locator("td").nth(1).inner_text() == ""
            assert (await healthy.locator("td.gpus").inner_text()).startswith("healthy 8 of 8 allocatable")
            assert await page.locator('tr.node[data-node="127.0.0.250"]').count() == 0
            assert await page.locator('#elsewhere li[data-target="node:127.0.0.250"]').count() == 1
            pause = await page.locator("#pause-all").inner_text()
            assert "api:erin" in pause and "rack 7 power work" in pause
        finally:
            await browser.close()

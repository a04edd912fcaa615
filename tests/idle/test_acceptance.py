"""Acceptance: an idle-GPU alert for a namespace's pod -> owner told on Slack -> wait -> approval in Chromium
-> workload scaled to zero and GPU quota lowered -> the report shows the GPU-hours saved -> revert restores.

The controller runs under uvicorn on 127.0.0.1 with its own worker, against the strict fake apiserver; Slack
is a local receiver; Playwright drives Debian's Chromium (never a downloaded browser).
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.adapters.kube import KubeAdapter
from remediator.engine.runtime import Runtime
from remediator.settings import Settings
from tests.helpers import am_alert, am_payload
from tests.idle.conftest import idle_labels
from tests.idle.fakescale import ScalingFakeKube
from tests.idle.scene import NS, OWNER, QUOTA, build_scene, definitions, quota_hard, replicas
from tests.notify.receiver import Receiver, receiver
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller
from tests.ui.test_browser import approval_url

TOKEN = "idle-token"

pytestmark = [pytest.mark.browser]


def serve(tmp_path: Path, slack_url: str, kube: KubeAdapter) -> AbstractAsyncContextManager[tuple[str, Runtime]]:
    rules, playbooks = definitions(tmp_path, wait="200ms", poll="50ms")
    return live_controller(
        lambda base: Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
            rules_dir=rules,
            playbooks_dir=playbooks,
            webhook_token=[TOKEN],
            public_url=base,
            slack_webhook_url=slack_url,
            secret_key="idle-secret",
            worker_poll_interval=0.05,  # type: ignore[arg-type]
        ),
        kube,
    )


async def wait_for_state(rt: Runtime, rem_id: str, state: str) -> None:
    async with asyncio.timeout(30):
        while (rem := await rt.repo.get(rem_id)) is None or rem.state != state:
            await asyncio.sleep(0.05)


async def slack_message(slack: Receiver, found: Any) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            for body in slack.bodies:
                if found(body):
                    return body
            await slack.wait_for(len(slack.bodies) + 1)


async def test_idle_alert_to_approved_reclaim_in_the_browser_and_revert(
    tmp_path: Path, fake_kube: ScalingFakeKube, kube_adapter: KubeAdapter
) -> None:
    from playwright.async_api import async_playwright

    pods = build_scene(fake_kube)
    async with receiver() as slack, serve(tmp_path, slack.url, kube_adapter) as (base, rt):
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=base, headers=auth) as api:
            alert = am_payload(am_alert(idle_labels(pods[0], NS)))
            assert (await api.post("/api/v1/alerts", json=alert)).status_code == 200

            owner = await slack_message(slack, lambda b: b.get("channel") == OWNER)
            assert pods[0] in str(owner["blocks"]) and "Deployment/notebook" in str(owner["blocks"])
            assert "GPU-hours" in owner["text"]
            await slack_message(slack, lambda b: "Approval needed" in b.get("text", ""))
            link = approval_url(slack)
            rem_id = (await api.get("/api/v1/remediations")).json()[0]["id"]
            await wait_for_state(rt, rem_id, "awaiting_approval")
            assert replicas(fake_kube) == 2 and quota_hard(fake_kube) == QUOTA  # nothing before the approval

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
                try:
                    page = await browser.new_page(viewport={"width": 390, "height": 844})
                    response = await page.goto(link)
                    assert response is not None and response.status == 200
                    assert await page.locator("tr.pod", has_text=pods[0]).count() == 1
                    await page.fill("#name", "Olivia Owner")
                    await page.click("#approve")
                    await page.wait_for_selector("#notice")
                    assert "approved by Olivia Owner" in await page.locator("#notice").inner_text()
                    await wait_for_state(rt, rem_id, "succeeded")

                    assert replicas(fake_kube) == 0
                    assert quota_hard(fake_kube) == {
                        **QUOTA,
                        "requests.nvidia.com/gpu": "4",
                        "limits.nvidia.com/gpu": "4",
                    }

                    audit = (await api.get(f"/api/v1/audit?remediation={rem_id}")).json()
                    [scaled] = [
                        e for e in audit if e["kind"] == "step.succeeded" and e["data"]["action"] == "scale_workload"
                    ]
                    until = (datetime.fromisoformat(scaled["ts"]) + timedelta(hours=3)).isoformat()
                    report = (await api.get("/api/v1/reports/idle", params={"until": until})).json()
                    [line] = report["namespaces"]
                    assert (line["namespace"], line["gpus_reclaimed"], line["gpus_reclaimed_now"]) == (NS, 4, 4)
                    assert line["gpu_hours_saved"] == pytest.approx(12.0, abs=0.01)
                    assert line["quota_lowered_now"] == {"nvidia.com/gpu": 4}

                    await page.goto(f"{base}/reports/idle?until={until.replace('+', '%2B')}")
                    row = page.locator(f'tr[data-namespace="{NS}"]')
                    assert await row.locator("td.gpus").inner_text() == "4"
                    assert await row.locator("td.hours").inner_text() == "12.00"
                finally:
                    await browser.close()

            reverted = await api.post(f"/api/v1/remediations/{rem_id}/revert")
            assert reverted.status_code == 200, reverted.text
            await wait_for_state(rt, rem_id, "reverted")
            assert replicas(fake_kube) == 2
            assert quota_hard(fake_kube) == QUOTA
            pod = fake_kube.pod(NS, pods[0])
            assert pod is not None and "remediator.io/idle-gpu" not in (pod["metadata"].get("annotations") or {})
            after = (await api.get("/api/v1/reports/idle")).json()
            assert after["namespaces"][0]["gpus_reclaimed_now"] == 0

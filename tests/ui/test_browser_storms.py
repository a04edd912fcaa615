"""The storm page in Chromium, against the strict fake Kubernetes API server: a driver rollout makes nodes fault
together, the controller opens a storm and holds their remediations; the fleet page shows it with its held count
and links to its page, which lists the nodes and the candidates with their counts; without a session the group
decision is refused and changes nothing; a signed-in person approves the group through the confirmation (which
says what will happen), the held remediations are released and the audit row names that person.

The controller runs under uvicorn on 127.0.0.1 with its own worker and a UI token, on loopback (pages open,
decisions only under a signed-in person). Playwright drives Debian's Chromium.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.adapters.kube import KubeAdapter
from remediator.settings import Settings
from tests.approvals.harness import TOKEN
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload, xid_labels
from tests.ui.browser_helpers import AUTH, PERSON, UI_TOKEN, assert_refused_without_session, sign_in
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller

pytestmark = [pytest.mark.browser]

DRIVER = "nvidia.com/cuda.driver-version.full"
ROLLED = ("n00", "n01", "n02", "n03", "n04", "n05")


async def until(check: Any, limit: float = 30.0) -> Any:
    async with asyncio.timeout(limit):
        while True:
            found = await check()
            if found:
                return found
            await asyncio.sleep(0.05)


@pytest.mark.timeout(240)
async def test_the_storm_page_shows_the_cause_and_a_signed_in_person_approves_the_group(
    tmp_path: Path, fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    from playwright.async_api import async_playwright

    for i in range(30):
        fake_kube.add_node(f"n{i:02}", labels={"nvidia.com/gpu.present": "true", "zone": f"z{i % 3}",
                                               DRIVER: "580.95.05" if i < 6 else "570.86.15"})

    def settings(base: str) -> Settings:
        return Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
            webhook_token=[TOKEN], public_url=base, secret_key="test-secret-key",
            ui_tokens=[f"{PERSON}:{UI_TOKEN}"], worker_poll_interval=0.05,
            held_recheck_interval=0.1,
            storm_p_value=0.01, max_quarantined_nodes="20",  # a small fleet: a looser threshold (docs/storms.md)
        )

    serving = live_controller(settings, kube=kube_adapter)
    async with serving as (base, _rt), httpx.AsyncClient(base_url=base, headers=AUTH) as api, \
            async_playwright() as pw:

        async def rems() -> dict[str, dict[str, Any]]:
            return {r["node"]: r for r in (await api.get("/api/v1/remediations")).json()}

        async def storms() -> list[dict[str, Any]]:
            return list((await api.get("/api/v1/storms")).json())

        alerts = [am_alert(xid_labels(n, 79, uuid=f"GPU-{n}")) for n in (*ROLLED, "n10")]
        assert (await api.post("/api/v1/alerts", json=am_payload(*alerts))).status_code == 200
        (storm,) = await until(storms)
        held = await until(lambda: _held(rems, storm["id"], len(ROLLED)))  # every node with the new driver
        assert sorted(held) == list(ROLLED)  # n10, outside the cause, is not held by the storm
        storm = (await api.get(f"/api/v1/storms/{storm['id']}")).json()
        assert storm["nodes"] == list(ROLLED)

        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            # The fleet page shows the open storm with its cause and held count, and links to its page.
            await page.goto(f"{base}/fleet")
            shown = page.locator(f".fleet-storm[data-storm='{storm['id']}']")
            assert "Storm on nodes running driver 580.95.05" in await shown.inner_text()
            assert await shown.locator(".held-count").inner_text() == str(len(held))
            async with page.expect_navigation():
                await shown.locator("a").click()
            assert page.url == f"{base}/storms/{storm['id']}"

            # Nodes, candidates with their counts, p-value and lift, the timeline.
            assert (await page.locator("#nodes").inner_text()).split() == sorted(storm["nodes"])
            cause = page.locator("#candidates tr.cause")
            assert await cause.locator("td").first.inner_text() == f"label:{DRIVER}"
            assert await cause.locator(".faulting").inner_text() == f"{len(storm['nodes'])} of 7"
            assert (await cause.locator(".fleet").inner_text()).startswith("6 of 30 (20%)")
            assert float(await cause.locator(".p-value").inner_text()) < 0.01
            assert float(await cause.locator(".lift").inner_text()) > 3
            assert "storm.opened" in await page.locator("#timeline").inner_text()
            assert await page.locator("#held li").count() == len(held)

            # Without a session: the page says so, and the decision is refused, changing nothing.
            assert await page.locator("#sign-in-needed").count() == 1
            async with page.expect_navigation() as nav:
                await page.click("#act-approve")
            await assert_refused_without_session(page, nav)
            assert (await api.get(f"/api/v1/storms/{storm['id']}")).json()["state"] == "open"

            # Signed in: the confirmation says what will happen, then the group is approved.
            await sign_in(page, base, f"/storms/{storm['id']}")
            await page.fill("#reason-approve", "driver rollout checked")
            await page.click("#act-approve")
            await page.wait_for_selector("#confirm")
            what = await page.locator("#what").inner_text()
            assert what == f"Release {len(held)} held remediations on nodes running driver 580.95.05", what
            details = await page.locator("#what-details").inner_text()
            assert f"Recorded in the audit log as decided by {PERSON}." in details
            assert (await api.get(f"/api/v1/storms/{storm['id']}")).json()["state"] == "open"  # nothing yet
            await page.click("#confirm-decision")
            await page.wait_for_url(f"{base}/storms/{storm['id']}?done=approved")
            assert await page.locator("#state").inner_text() == "approved"
            assert await page.locator("#decided-by").inner_text() == PERSON

            decided = (await api.get(f"/api/v1/storms/{storm['id']}")).json()
            assert decided["state"] == "approved" and decided["decided_by"] == PERSON
            after = await until(lambda: _released(rems, held))
            assert all(after[n]["state"] != "held" for n in held), after
            events = (await api.get("/api/v1/audit", params={"limit": 10000})).json()
            (approved,) = [e for e in events if e["kind"] == "storm.approved"]
            assert approved["actor"] == PERSON and approved["data"]["reason"] == "driver rollout checked"
            assert sorted(approved["data"]["remediations"]) == sorted(r["id"] for r in held.values())

            # A second decision is refused: the first one stands.
            await page.goto(f"{base}/storms/{storm['id']}")
            assert await page.locator("#act-reject").count() == 0
        finally:
            await browser.close()


async def _held(rems: Any, storm_id: str, count: int) -> dict[str, dict[str, Any]] | None:
    found = {n: r for n, r in (await rems()).items()
             if r["state"] == "held" and (r["state_reason"] or "").startswith(f"storm {storm_id}:")}
    return found if len(found) >= count else None


async def _released(rems: Any, held: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
    now = await rems()
    return now if all(now[n]["state"] != "held" for n in held) else None

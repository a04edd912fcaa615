"""The remediation page's moves in Chromium, against the strict fake Kubernetes API server: a signed-in person
approves, rejects, cancels, releases, reverts and returns to service through the confirmation step, and each
ends in the state it names, with the node changed as said and the audit row naming that person; without a
session the same click does nothing.

The controller runs under uvicorn on 127.0.0.1 with its own worker and a UI token, on loopback (pages open,
moves only under a signed-in person). Playwright drives Debian's Chromium.
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
from tests.engine.definitions import GATED_PLAYBOOK, GATED_RULE, definitions
from tests.fakekube.server import FakeKube
from tests.helpers import am_alert, am_payload
from tests.ui.browser_helpers import AUTH, PERSON, UI_TOKEN, assert_refused_without_session, sign_in
from tests.ui.live import CHROMIUM, CHROMIUM_ARGS, live_controller

pytestmark = [pytest.mark.browser]

TAINT = "remediator.io/gpu-unhealthy"

def node_held(fake: FakeKube, name: str) -> dict[str, bool]:
    node = fake.node(name)
    assert node is not None
    return {
        "tainted": any(t["key"] == TAINT for t in node["spec"].get("taints") or []),
        "cordoned": bool(node["spec"].get("unschedulable")),
    }


class Api:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def fire(self, node: str, summary: str) -> str:
        """A new alert (its own label set, so never a repeat delivery) and the remediation it starts, once that
        waits for something."""
        alert = am_alert({"alertname": "GPUNote", "Hostname": node, "note": summary}, annotations={"summary": summary})
        r = await self.client.post("/api/v1/alerts", json=am_payload(alert))
        assert r.status_code == 200, r.text
        async with asyncio.timeout(30):
            while True:
                rems = (await self.client.get("/api/v1/remediations", params={"node": node})).json()
                fresh = [x for x in rems if x["state"] not in ("returned", "reverted", "cancelled", "rejected")]
                if fresh and fresh[0]["state"] not in ("pending", "running"):
                    return str(fresh[0]["id"])
                await asyncio.sleep(0.05)

    async def state(self, rem_id: str, *wanted: str) -> dict[str, Any]:
        async with asyncio.timeout(30):
            while True:
                rem: dict[str, Any] = (await self.client.get(f"/api/v1/remediations/{rem_id}")).json()
                if rem["state"] in wanted:
                    return rem
                await asyncio.sleep(0.05)

    async def audit(self, rem_id: str, kind: str) -> list[dict[str, Any]]:
        events = (await self.client.get("/api/v1/audit", params={"remediation": rem_id, "limit": 10000})).json()
        return [e for e in events if e["kind"] == kind]

    async def approvals(self, rem_id: str) -> list[dict[str, Any]]:
        return list((await self.client.get("/api/v1/approvals", params={"remediation": rem_id})).json())


@pytest.mark.timeout(240)
async def test_a_signed_in_person_makes_every_move_from_the_page(
    tmp_path: Path, fake_kube: FakeKube, kube_adapter: KubeAdapter
) -> None:
    from playwright.async_api import Page, async_playwright

    for name in ("gpu-1", "gpu-2", "gpu-3"):
        fake_kube.add_node(name)

    def settings(base: str) -> Settings:
        return Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
            webhook_token=[TOKEN], public_url=base, secret_key="test-secret-key",
            ui_tokens=[f"{PERSON}:{UI_TOKEN}"], worker_poll_interval=0.05,  # type: ignore[arg-type]
            node_repeat_limit=1,  # a second remediation of a node is held for a human: the one to release
            **definitions(tmp_path, GATED_RULE, GATED_PLAYBOOK),
        )

    async def move(page: Page, base: str, rem_id: str, action: str, *, reason: str = "",
                   skip: tuple[str, ...] = ()) -> str:
        """Open the page, fill the move's form, read the confirmation, confirm; the confirmation's text."""
        await page.goto(f"{base}/remediations/{rem_id}")
        if reason:
            await page.fill(f"#reason-{action}", reason)
        for s in skip:
            await page.check(f"#skip-{s}")
        await page.click(f"#act-{action}")
        await page.wait_for_selector("#confirm")
        what = await page.locator("#what").inner_text()
        await page.click("#confirm-move")
        await page.wait_for_url(f"{base}/remediations/{rem_id}?done={action}")
        return what

    serving = live_controller(settings, kube=kube_adapter)
    async with serving as (base, _rt), httpx.AsyncClient(base_url=base, headers=AUTH) as client, \
            async_playwright() as pw:
        api = Api(client)
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            first = await api.fire("gpu-1", "one")
            assert (await api.state(first, "awaiting_approval"))["state"] == "awaiting_approval"

            # Without a session: the page says so, and the click changes nothing.
            await page.goto(f"{base}/remediations/{first}")
            assert await page.locator("#sign-in-needed").count() == 1
            async with page.expect_navigation() as nav:
                await page.click("#act-approve")
            await assert_refused_without_session(page, nav)
            assert (await api.state(first, "awaiting_approval"))["state"] == "awaiting_approval"
            assert [a["status"] for a in await api.approvals(first)] == ["pending"]

            await sign_in(page, base, f"/remediations/{first}")

            # Approve: the cordon runs.
            what = await move(page, base, first, "approve", reason="checked the logs")
            assert "Approve step cordon of gated-node on gpu-1" in what and "cordon (cordon)" in what
            await api.state(first, "succeeded")
            assert node_held(fake_kube, "gpu-1") == {"tainted": True, "cordoned": True}
            (approval,) = await api.approvals(first)
            assert approval["status"] == "approved" and approval["decided_by"] == PERSON
            assert [e["actor"] for e in await api.audit(first, "state.running")][-1] == PERSON

            # Return to service, the reboot wait skipped: the confirmation names the undo steps.
            what = await move(page, base, first, "return", reason="hardware checked by hand", skip=("reboot",))
            assert what.startswith("Return gpu-1 to service now: ")
            assert f"remove taint {TAINT}:NoSchedule from gpu-1" in what and "uncordon gpu-1" in what
            assert "skipping reboot" in what
            rem = await api.state(first, "returned")
            assert rem["state_reason"] == "returned to service by Alice Browser: hardware checked by hand; " \
                                          "skipping reboot"
            assert node_held(fake_kube, "gpu-1") == {"tainted": False, "cordoned": False}
            (returned,) = await api.audit(first, "state.returned")
            assert returned["actor"] == PERSON and returned["data"]["return"]["reason"] == "hardware checked by hand"

            # Reject, then revert what the taint did.
            second = await api.fire("gpu-2", "two")
            await api.state(second, "awaiting_approval")
            what = await move(page, base, second, "reject", reason="not now")
            assert "do not run cordon" in what
            await api.state(second, "rejected")
            (approval,) = await api.approvals(second)
            assert approval["status"] == "rejected" and approval["decided_by"] == PERSON
            assert node_held(fake_kube, "gpu-2") == {"tainted": True, "cordoned": False}
            what = await move(page, base, second, "revert")
            assert f"remove taint {TAINT}:NoSchedule from gpu-2" in what and "uncordon" not in what
            await api.state(second, "reverted")
            assert node_held(fake_kube, "gpu-2") == {"tainted": False, "cordoned": False}
            (requested,) = [e for e in await api.audit(second, "state.reverting") if e["data"]["event"] == "revert"]
            assert requested["actor"] == PERSON

            # Cancel: stopped where it is, the approval superseded, the taint kept.
            third = await api.fire("gpu-3", "three")
            await api.state(third, "awaiting_approval")
            what = await move(page, base, third, "cancel", reason="wrong node")
            assert "nothing is undone" in what and f"remove taint {TAINT}:NoSchedule from gpu-3" in what
            rem = await api.state(third, "cancelled")
            assert rem["state_reason"] == "cancelled by Alice Browser: wrong node"
            (approval,) = await api.approvals(third)
            assert approval["status"] == "superseded" and approval["decided_by"] == PERSON
            (cancelled,) = await api.audit(third, "state.cancelled")
            assert cancelled["actor"] == PERSON and cancelled["data"]["reason"] == "wrong node"
            assert node_held(fake_kube, "gpu-3") == {"tainted": True, "cordoned": False}

            # Release: gpu-1 was remediated before, so its next remediation is held for a human.
            fourth = await api.fire("gpu-1", "four")
            assert (await api.state(fourth, "held"))["state"] == "held"
            what = await move(page, base, fourth, "release", reason="known cause, fixed")
            assert "move it back to pending" in what and "taint (taint), cordon (cordon)" in what
            await api.state(fourth, "awaiting_approval")
            (released,) = [e for e in await api.audit(fourth, "state.pending") if e["data"].get("event") == "release"]
            assert released["actor"] == PERSON
            everything = (await client.get("/api/v1/audit", params={"limit": 10000})).json()
            assert [e["actor"] for e in everything if e["kind"] == "guardrail.override"] == [PERSON]
        finally:
            await browser.close()

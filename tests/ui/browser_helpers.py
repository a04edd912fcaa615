"""What the browser tests share: the signed-in person and the API's bearer header, signing in through /login, the
refusal a page shows without a session, the audit rows of one kind, and waiting for an approval request to reach
Slack; one copy, so every page test signs in and checks a refusal the same way."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import httpx

from remediator.engine.runtime import Runtime
from tests.approvals.harness import TOKEN
from tests.helpers import am_payload
from tests.notify.receiver import Receiver
from tests.ui.test_browser import approval_url, wait_for_state

if TYPE_CHECKING:
    from playwright.async_api import EventInfo, Page, Response

UI_TOKEN = "alice-browser-token-0123456789"
PERSON = "Alice Browser"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def sign_in(page: Page, base: str, next_path: str) -> None:
    """Sign in as PERSON through the login page, and land on `next_path`."""
    await page.goto(f"{base}/login?next={next_path}")
    await page.fill("#account", PERSON)
    await page.fill("#token", UI_TOKEN)
    await page.click("#sign-in")
    await page.wait_for_url(f"{base}{next_path}")


async def assert_refused_without_session(page: Page, nav: EventInfo[Response]) -> None:
    """The navigation a form's submission caused answered 403 with the page asking to sign in first."""
    response = await nav.value
    assert response is not None and response.status == 403
    assert "Sign in first" in await page.content()


async def audit_of(api: httpx.AsyncClient, kind: str) -> list[dict[str, Any]]:
    events = (await api.get("/api/v1/audit", params={"limit": 10000})).json()
    return [e for e in events if e["kind"] == kind]


async def approval_requested(
    api: httpx.AsyncClient, slack: Receiver, rt: Runtime, alert: dict[str, Any]
) -> tuple[str, str]:
    """Post `alert`; once Slack has the approval request, return its link and the one remediation's ID, which
    then awaits approval."""
    assert (await api.post("/api/v1/alerts", json=am_payload(alert))).status_code == 200
    async with asyncio.timeout(30):
        while not any("Approval needed" in b.get("text", "") for b in slack.bodies):
            await slack.wait_for(len(slack.bodies) + 1)
    link = approval_url(slack)
    (listed,) = (await api.get("/api/v1/remediations")).json()
    rem_id = str(listed["id"])
    await wait_for_state(rt, rem_id, "awaiting_approval")
    return link, rem_id

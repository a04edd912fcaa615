"""The remediation page's moves over HTTP: each needs a signed-in person (also on the open loopback UI), the
page's CSRF token, a reason where the API asks for one, and a confirmation; nothing is done before the
confirmed POST, and a move the state does not allow is neither offered nor done.

The controller is the plan-only one of tests/approvals (the gated-drain playbook waits for approval of its
drain step), on loopback with a UI token, driven in-process.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from remediator.api.csrf import COOKIE, Csrf
from tests.approvals.harness import Gated, gated_controller

ALICE_TOKEN = "alice-ui-token-0123456789abcdef"


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, html
    return match.group(1)


def offered(html: str) -> list[str]:
    return re.findall(r'id="move-([a-z]+)"', html)


async def snapshot(gated: Gated, rem_id: str) -> tuple[Any, ...]:
    rem = await gated.rt.repo.get(rem_id)
    assert rem is not None
    approvals = [(a.decision, a.decided_by) for a in await gated.rt.repo.approvals_of(rem_id)]
    return rem.state, approvals, len(await gated.rt.repo.list_audit(limit=10_000))


async def sign_in(gated: Gated, target: str) -> None:
    page = await gated.client.get("/login", params={"next": target})
    r = await gated.client.post(
        "/login", data={"csrf": csrf_of(page.text), "name": "alice", "token": ALICE_TOKEN, "next": target}
    )
    assert r.status_code == 303, r.text


async def test_a_move_without_a_session_or_with_a_stolen_token_does_nothing(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        rem = await gated.fire()
        url = f"/remediations/{rem.id}/moves"
        before = await snapshot(gated, rem.id)
        assert before[0] == "awaiting_approval"
        page = await gated.client.get(f"/remediations/{rem.id}")
        assert 'id="sign-in-needed"' in page.text
        assert offered(page.text) == ["approve", "reject", "cancel", "return"]
        confirmed = {"reason": "r", "confirmed": "yes", "seen_state": "awaiting_approval"}
        # No cookie at all: the CSRF check fails first.
        async with httpx.AsyncClient(transport=gated.client._transport, base_url="http://127.0.0.1:9") as bare:
            for action in ("approve", "cancel", "return"):
                r = await bare.post(url, data={"csrf": csrf_of(page.text), "action": action, **confirmed})
                assert r.status_code == 403 and "nothing was done" in r.text
        # A stolen nonce cookie and its form token, but no session: refused as well.
        nonce = "n" * 32
        gated.client.cookies.set(COOKIE, nonce)
        stolen = Csrf(b"test-secret-key", secure_cookie=False).token(nonce, f"ui:{rem.id}")
        for action in ("approve", "reject", "cancel", "return"):
            r = await gated.client.post(url, data={"csrf": stolen, "action": action, "name": "mallory", **confirmed})
            assert r.status_code == 403 and "Sign in first" in r.text, r.text
        await gated.settle()
        assert await snapshot(gated, rem.id) == before


async def test_cancel_needs_a_reason_and_a_confirmation_then_is_done_as_the_person(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        rem = await gated.fire()
        target = f"/remediations/{rem.id}"
        url = f"{target}/moves"
        await sign_in(gated, target)
        page = await gated.client.get(target)
        assert 'id="sign-in-needed"' not in page.text and "<strong>alice</strong>" in page.text
        csrf = csrf_of(page.text)
        before = await snapshot(gated, rem.id)

        blank = await gated.client.post(url, data={"csrf": csrf, "action": "cancel", "reason": "  "})
        assert blank.status_code == 422 and "reason is required" in blank.text
        bogus = await gated.client.post(url, data={"csrf": csrf, "action": "explode", "reason": "x"})
        assert bogus.status_code == 400
        released = await gated.client.post(url, data={"csrf": csrf, "action": "release", "reason": "x"})
        assert released.status_code == 409 and "awaiting_approval" in released.text
        confirm = await gated.client.post(url, data={"csrf": csrf, "action": "cancel", "reason": "wrong node"})
        assert confirm.status_code == 200
        assert "Cancel gated-drain on gpu-node-1 where it is" in confirm.text and "nothing is undone" in confirm.text
        assert 'name="seen_state" value="awaiting_approval"' in confirm.text
        assert await snapshot(gated, rem.id) == before  # the confirmation changes nothing
        stale = await gated.client.post(
            url, data={"csrf": csrf, "action": "cancel", "reason": "wrong node", "confirmed": "yes",
                       "seen_state": "running"},
        )
        assert stale.status_code == 409 and "confirm anew" in stale.text
        assert await snapshot(gated, rem.id) == before

        done = await gated.client.post(
            url, data={"csrf": csrf, "action": "cancel", "reason": "wrong node", "confirmed": "yes",
                       "seen_state": "awaiting_approval"},
        )
        assert done.status_code == 303 and done.headers["location"] == f"{target}?done=cancel"
        after = await gated.rt.repo.get(rem.id)
        assert after is not None and after.state == "cancelled"
        assert after.state_reason == "cancelled by alice: wrong node"
        (approval,) = await gated.rt.repo.approvals_of(rem.id)
        assert approval.decision == "superseded" and approval.decided_by == "alice"
        events = await gated.rt.repo.list_audit(remediation_id=rem.id)
        (cancelled,) = [e for e in events if e.kind == "state.cancelled"]
        assert cancelled.actor == "alice" and cancelled.data["reason"] == "wrong node"

        # What the state no longer allows is neither offered nor done.
        page = await gated.client.get(f"{target}?done=cancel")
        assert 'id="done"' in page.text and "approve" not in offered(page.text)
        assert "cancel" not in offered(page.text) and "revert" in offered(page.text)
        late = await gated.client.post(
            url, data={"csrf": csrf, "action": "approve", "confirmed": "yes", "seen_state": "cancelled"}
        )
        assert late.status_code == 409 and "Cannot approve a remediation that is cancelled" in late.text
        (approval,) = await gated.rt.repo.approvals_of(rem.id)
        assert approval.decision == "superseded"


async def test_beyond_loopback_a_return_without_a_session_goes_to_sign_in(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, listen_host="0.0.0.0", ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        rem = await gated.fire()
        before = await snapshot(gated, rem.id)
        nonce = "n" * 32
        gated.client.cookies.set(COOKIE, nonce)
        stolen = Csrf(b"test-secret-key", secure_cookie=False).token(nonce, f"ui:{rem.id}")
        r = await gated.client.post(
            f"/remediations/{rem.id}/moves",
            data={"csrf": stolen, "action": "return", "reason": "x", "confirmed": "yes",
                  "seen_state": "awaiting_approval"},
        )
        assert r.status_code == 303 and r.headers["location"] == f"/login?next=/remediations/{rem.id}"
        await gated.settle()
        assert await snapshot(gated, rem.id) == before

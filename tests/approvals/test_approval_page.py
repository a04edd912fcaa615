"""The approval link: hashed tokens, a read-only GET, a CSRF-checked single-use POST, expiry and tampering."""

from __future__ import annotations

import asyncio
import hashlib
import re
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from remediator.engine.approvals import Approvals
from tests.approvals.harness import Gated, gated_controller

SLACKBOT = "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"


def path_of(link: str) -> str:
    return "/" + link.split("/", 3)[3]


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


async def open_form(gated: Gated) -> tuple[str, str]:
    """(path, csrf field) as a browser gets them: GET the link, keep the cookie."""
    path = path_of(await gated.link())
    page = await gated.client.get(path)
    assert page.status_code == 200, page.text
    return path, csrf_of(page.text)


async def audit_kinds(gated: Gated, rem_id: str) -> list[tuple[str, str]]:
    return [(e.kind, e.actor) for e in await gated.rt.repo.list_audit(remediation_id=rem_id)]


async def test_gated_step_waits_and_the_token_is_random_and_stored_hashed(gated: Gated) -> None:
    rem = await gated.fire()
    assert rem.state == "awaiting_approval"
    token = await gated.token()
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)  # 256 bits
    approvals = await gated.rt.repo.approvals_of(rem.id)
    assert [a.token_hash for a in approvals] == [hashlib.sha256(token.encode()).hexdigest()]
    stored = repr([a.__dict__ for a in approvals]) + repr(await gated.rt.repo.list_audit())
    stored += repr((await gated.rt.repo.get(rem.id)).__dict__)  # type: ignore[union-attr]
    assert token not in stored


async def test_page_shows_alert_node_gpu_pods_steps_and_time_left(gated: Gated) -> None:
    await gated.fire()
    page = await gated.client.get(path_of(await gated.link()))
    assert page.status_code == 200
    text = page.text
    for expected in (
        "GPUXidError",
        "gpu-node-1",
        "GPU-8e6a1c2d",
        "trainer-0",
        "ml",
        "drain",
        "needs approval",
        "will run",
        "min left",
        "channel:capture",
        'name="viewport"',
    ):
        assert expected in text, expected
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    assert "samesite=strict" in page.headers["set-cookie"].lower()


@pytest.mark.parametrize("agent", [SLACKBOT, "Mozilla/5.0 (compatible; MSIE 10.0; scanner)"])
async def test_get_never_changes_state_or_audit(gated: Gated, agent: str) -> None:
    rem = await gated.fire()
    path = path_of(await gated.link())
    before = await gated.rt.repo.list_audit()
    for _ in range(3):
        r = await gated.client.get(path, headers={"User-Agent": agent})
        assert r.status_code == 200
        head = await gated.client.head(path, headers={"User-Agent": agent})
        assert head.status_code in (200, 405)
    await gated.settle()
    assert await gated.state(rem.id) == "awaiting_approval"
    assert [e.hash for e in await gated.rt.repo.list_audit()] == [e.hash for e in before]


async def test_approve_continues_the_playbook_and_audit_names_the_approver(gated: Gated) -> None:
    rem = await gated.fire()
    path, csrf = await open_form(gated)
    r = await gated.client.post(path, data={"csrf": csrf, "name": "Alice Example", "decision": "approve"})
    assert r.status_code == 200, r.text
    assert "Recorded: approved by Alice Example" in r.text
    await gated.settle()
    assert await gated.state(rem.id) == "planned"
    kinds = await audit_kinds(gated, rem.id)
    assert ("state.running", "Alice Example") in kinds
    steps = {s.name: s.status for s in await gated.rt.repo.steps(rem.id)}
    assert steps == {"mark": "planned", "drain": "planned", "tell": "planned"}
    events = [m.event for m in gated.capture.messages]
    assert events[:3] == ["started", "approval_requested", "approved"] and events[-1] == "planned"


async def test_reject_ends_the_remediation(gated: Gated) -> None:
    rem = await gated.fire()
    path, csrf = await open_form(gated)
    r = await gated.client.post(
        path, data={"csrf": csrf, "name": "bob", "decision": "reject", "comment": "busy"}
    )
    assert r.status_code == 200
    await gated.settle()
    fresh = await gated.rt.repo.get(rem.id)
    decided = await gated.rt.repo.current_approval(rem.id)
    assert fresh is not None and fresh.state == "rejected" and decided is not None and decided.decided_by == "bob"
    assert ("state.rejected", "bob") in await audit_kinds(gated, rem.id)
    assert "drain" not in {s.name for s in await gated.rt.repo.steps(rem.id)}


async def test_second_decision_is_refused_with_who_decided_what_and_when(gated: Gated) -> None:
    rem = await gated.fire()
    path, csrf = await open_form(gated)
    first = await gated.client.post(path, data={"csrf": csrf, "name": "alice", "decision": "approve"})
    assert first.status_code == 200
    audit = await gated.rt.repo.list_audit()
    again = await gated.client.post(path, data={"csrf": csrf, "name": "mallory", "decision": "reject"})
    assert again.status_code == 409
    assert "already decided: approved by alice at" in again.text
    assert len(await gated.rt.repo.list_audit()) == len(audit)
    await gated.settle()
    assert await gated.state(rem.id) == "planned"


async def test_concurrent_decisions_exactly_one_wins(gated: Gated) -> None:
    await gated.fire()
    approvals = Approvals(gated.rt)
    view = await approvals.view(await gated.token())
    outcomes = await asyncio.gather(
        *(
            approvals.decide_request(view, "approved" if i % 2 else "rejected", actor=f"p{i}", source="page")
            for i in range(6)
        )
    )
    assert sorted(o.result for o in outcomes) == ["already"] * 5 + ["decided"]


@pytest.mark.parametrize(
    ("mangle", "status"),
    [
        (lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"), 404),  # one character changed
        (lambda t: t[:20], 400),  # cut off
        (lambda t: "x" * 43, 404),  # well-formed, never issued
        (lambda t: t + "%3Cscript%3E", 400),
    ],
)
async def test_tampered_unknown_and_malformed_links_get_a_clear_page(
    gated: Gated, mangle, status: int
) -> None:
    rem = await gated.fire()
    token = await gated.token()
    path = f"/approvals/{mangle(token)}"
    for response in (
        await gated.client.get(path),
        await gated.client.post(path, data={"decision": "approve"}),
    ):
        assert response.status_code == status
        assert response.headers["content-type"].startswith("text/html")
        assert "Approval link not valid" in response.text and "Traceback" not in response.text
        assert "<script>" not in response.text
    assert await gated.state(rem.id) == "awaiting_approval"


async def test_expired_link_is_410_and_the_remediation_expires_audited_and_notified(gated: Gated) -> None:
    rem = await gated.fire()
    path, csrf = await open_form(gated)
    gated.clock.advance(gated.settings.approval_ttl + timedelta(seconds=1))
    page = await gated.client.get(path)
    assert page.status_code == 410 and "expired" in page.text
    late = await gated.client.post(path, data={"csrf": csrf, "name": "alice", "decision": "approve"})
    assert late.status_code == 410
    await gated.worker.run_once()
    await gated.settle()
    assert await gated.state(rem.id) == "expired"
    kinds = [k for k, _ in await audit_kinds(gated, rem.id)]
    assert "approval.expired" in kinds and "state.expired" in kinds
    assert "expired" in [m.event for m in gated.capture.messages]
    approvals = await gated.rt.repo.approvals_of(rem.id)
    assert approvals[-1].decision == "expired"


async def test_on_expiry_continue_runs_the_gated_step(gated: Gated) -> None:
    labels = {"alertname": "GPUECCUncorrectableError", "Hostname": "gpu-node-2", "UUID": "GPU-1", "gpu": "0"}
    rem = await gated.fire(labels)
    waited = await gated.rt.repo.current_approval(rem.id)
    assert rem.state == "awaiting_approval" and waited is not None and waited.step_index == 0
    gated.clock.advance(gated.settings.approval_ttl + timedelta(seconds=1))
    await gated.worker.run_once()
    await gated.settle()
    assert await gated.state(rem.id) == "planned"
    expired = [
        e for e in await gated.rt.repo.list_audit(remediation_id=rem.id) if e.kind == "approval.expired"
    ]
    assert expired and expired[0].data["on_expiry"] == "continue"


async def test_csrf_missing_wrong_or_foreign_is_403_and_decides_nothing(gated: Gated) -> None:
    rem = await gated.fire()
    path, csrf = await open_form(gated)
    bad_fields = [{}, {"csrf": "0" * 64}, {"csrf": csrf[:-1] + ("0" if csrf[-1] != "0" else "1")}]
    for extra in bad_fields:
        r = await gated.client.post(path, data={"name": "alice", "decision": "approve", **extra})
        assert r.status_code == 403 and "Form could not be verified" in r.text
    # The right field without the browser's cookie (a cross-site form post): refused too.
    async with httpx.AsyncClient(transport=gated.client._transport, base_url="http://127.0.0.1:9") as other:
        r = await other.post(path, data={"csrf": csrf, "name": "alice", "decision": "approve"})
        assert r.status_code == 403
    assert await gated.state(rem.id) == "awaiting_approval"


async def test_a_name_is_required_without_a_proxy_header(gated: Gated) -> None:
    rem = await gated.fire()
    path, csrf = await open_form(gated)
    r = await gated.client.post(path, data={"csrf": csrf, "name": "  ", "decision": "approve"})
    assert r.status_code == 400 and "Type your name" in r.text
    r = await gated.client.post(path, data={"csrf": csrf, "name": "alice", "decision": "maybe"})
    assert r.status_code == 400
    assert await gated.state(rem.id) == "awaiting_approval"


async def test_trusted_header_names_the_approver_and_the_allowlist_applies(tmp_path: Path) -> None:
    async with gated_controller(
        tmp_path, approver_header="X-Forwarded-Email", approvers=["alice@example.com"], trusted_proxies=["127.0.0.1"]
    ) as gated:
        rem = await gated.fire()
        path, csrf = await open_form(gated)
        form = {"csrf": csrf, "name": "typed-name-ignored", "decision": "approve"}
        missing = await gated.client.post(path, data=form)
        assert missing.status_code == 403 and "X-Forwarded-Email" in missing.text
        outsider = await gated.client.post(path, data=form, headers={"X-Forwarded-Email": "bob@example.com"})
        assert outsider.status_code == 403 and "not on the list of approvers" in outsider.text
        assert await gated.state(rem.id) == "awaiting_approval"
        ok = await gated.client.post(path, data=form, headers={"X-Forwarded-Email": "Alice@Example.com"})
        assert ok.status_code == 200
        fresh = await gated.rt.repo.current_approval(rem.id)
        assert fresh is not None and fresh.decided_by == "Alice@Example.com"

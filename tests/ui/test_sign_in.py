"""Sign-in to the web UI: beyond loopback no page shows data and no form decides without a signed-in person.

The app is told it listens on 0.0.0.0 (as `remediator serve --host 0.0.0.0` does) while the test client
talks to it in-process; the person signs in either through a trusted proxy's header or with a UI token.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from typer.testing import CliRunner

from remediator.api.csrf import COOKIE, Csrf
from remediator.api.signin import SESSION_COOKIE, SignIn, safe_next
from remediator.settings import Settings
from tests.approvals.harness import TOKEN, Gated, gated_controller

# A confirmed approve or reject from the remediation page's move form (the confirmation page's hidden fields).
CONFIRMED_APPROVE = {"action": "approve", "confirmed": "yes", "seen_state": "awaiting_approval"}
CONFIRMED_REJECT = {"action": "reject", "confirmed": "yes", "seen_state": "awaiting_approval"}


AUTH = {"Authorization": f"Bearer {TOKEN}"}
ALICE_TOKEN = "alice-ui-token-0123456789abcdef"
BOB_TOKEN = "bob-ui-token-0123456789abcdef"
PUBLIC = "0.0.0.0"
HEADER = "X-Forwarded-Email"
PROXY = "10.0.0.5"

# Paths that are not the web UI: they have their own credentials (bearer token, approval link token, Slack
# signature) or show nothing about remediations.
NOT_UI = ("/api/", "/approvals/", "/slack/", "/static", "/login", "/logout", "/docs", "/redoc", "/openapi.json")
PUBLIC_PATHS = {"/healthz", "/readyz", "/metrics"}


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, html
    return match.group(1)


def forged_csrf(client: httpx.AsyncClient, purpose: str) -> str:
    """What an attacker who once saw the page holds: a valid cookie nonce and its form token."""
    nonce = "n" * 32
    client.cookies.set(COOKIE, nonce)
    return Csrf(b"test-secret-key", secure_cookie=False).token(nonce, purpose)


def assert_sign_in_redirect(response: httpx.Response, *secrets: str) -> None:
    assert response.status_code == 303, (response.status_code, response.text[:300])
    assert response.headers["location"].startswith("/login?next=")
    for secret in secrets:
        assert secret not in response.text


async def snapshot(gated: Gated, rem_id: str) -> tuple[Any, ...]:
    rem = await gated.rt.repo.get(rem_id)
    assert rem is not None
    current = await gated.rt.repo.current_approval(rem_id)
    approvals = [(a.decision, a.decided_by) for a in await gated.rt.repo.approvals_of(rem_id)]
    audit = len(await gated.rt.repo.list_audit(remediation_id=rem_id, limit=10_000))
    return rem.state, current.decided_by if current else None, approvals, audit


def routes_of(routes: list[Any]) -> list[APIRoute]:
    """Every APIRoute, also inside routers FastAPI keeps as included-router entries (no include prefixes here)."""
    out: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            out.append(route)
        elif (inner := getattr(route, "original_router", None)) is not None:
            out.extend(routes_of(inner.routes))
    return out


def ui_paths(app: FastAPI, rem_id: str) -> list[str]:
    """Every GET page of the app that is part of the web UI, with path parameters filled in."""
    out = []
    for route in routes_of(app.routes):
        if "GET" not in route.methods:
            continue
        if route.path in PUBLIC_PATHS or route.path.startswith(NOT_UI):
            continue
        if route.path.endswith("/approval/{token}"):  # a storm's Slack link: its own token, like /approvals/
            continue
        out.append(re.sub(r"\{[^}]+\}", rem_id, route.path))
    return out


async def login(gated: Gated, token: str, target: str = "/", name: str = "alice") -> httpx.Response:
    page = await gated.client.get("/login", params={"next": target})
    assert page.status_code == 200
    return await gated.client.post(
        "/login", data={"csrf": csrf_of(page.text), "name": name, "token": token, "next": target}
    )


async def test_beyond_loopback_the_ui_shows_nothing_and_decides_nothing_without_sign_in(tmp_path: Path) -> None:
    async with gated_controller(
        tmp_path, listen_host=PUBLIC, ui_tokens=[f"alice:{ALICE_TOKEN}"], approver_header=HEADER,
        trusted_proxies=[PROXY],
    ) as gated:
        rem = await gated.fire()
        before = await snapshot(gated, rem.id)
        assert before[0] == "awaiting_approval"
        paths = ui_paths(gated.app, rem.id)
        assert {"/", f"/remediations/{rem.id}", "/definitions", "/reports/idle"} <= set(paths)
        for path in paths:
            assert_sign_in_redirect(await gated.client.get(path), rem.id, "gpu-node-1", "trainer-0")
        detail = await gated.client.get(f"/remediations/{rem.id}")
        assert detail.headers["location"] == f"/login?next=/remediations/{rem.id}"
        # The header from a peer that is not the trusted proxy counts for nothing.
        assert_sign_in_redirect(await gated.client.get("/", headers={HEADER: "alice@example.com"}), rem.id)

        url = f"/remediations/{rem.id}/moves"
        csrf = forged_csrf(gated.client, f"ui:{rem.id}")
        for extra in ({}, {HEADER: "alice@example.com"}):
            r = await gated.client.post(
                url, data={"csrf": csrf, "name": "x", **CONFIRMED_APPROVE}, headers=extra
            )
            assert_sign_in_redirect(r)
            assert r.headers["location"] == f"/login?next=/remediations/{rem.id}"
        gated.client.cookies.set(SESSION_COOKIE, f"YWxpY2U.{2**40}.{'s' * 22}.{'0' * 64}")  # a forged session
        r = await gated.client.post(url, data={"csrf": csrf, "name": "x", **CONFIRMED_APPROVE})
        assert_sign_in_redirect(r)
        await gated.settle()
        assert await snapshot(gated, rem.id) == before

        # The bearer API and the approval link keep their own credentials.
        assert (await gated.client.get(f"/api/v1/remediations/{rem.id}")).status_code == 401
        link = await gated.link()
        assert (await gated.client.get(link)).status_code == 200


async def test_nobody_can_sign_in_when_no_way_is_configured(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, listen_host=PUBLIC) as gated:
        rem = await gated.fire()
        assert_sign_in_redirect(await gated.client.get("/"), rem.id)
        page = await gated.client.get("/login?next=/")
        assert page.status_code == 200 and 'id="no-sign-in"' in page.text and rem.id not in page.text
        csrf = forged_csrf(gated.client, "login")
        r = await gated.client.post("/login", data={"csrf": csrf, "name": "alice", "token": ALICE_TOKEN})
        assert r.status_code == 401 and SESSION_COOKIE not in r.headers.get("set-cookie", "")


async def test_token_login_decides_under_the_signed_in_name(tmp_path: Path) -> None:
    async with gated_controller(
        tmp_path, listen_host=PUBLIC, ui_tokens=[f"alice:{ALICE_TOKEN}", f"bob:{BOB_TOKEN}"]
    ) as gated:
        rem = await gated.fire()
        target = f"/remediations/{rem.id}"
        wrong = await login(gated, ALICE_TOKEN[:-1] + "X", target)
        assert wrong.status_code == 401 and 'id="error"' in wrong.text and SESSION_COOKIE not in gated.client.cookies
        # Bob's token does not sign in as alice, nor alice's as bob.
        assert (await login(gated, BOB_TOKEN, target)).status_code == 401
        assert (await login(gated, ALICE_TOKEN, target, name="bob")).status_code == 401
        assert_sign_in_redirect(await gated.client.get(target), rem.id)

        ok = await login(gated, ALICE_TOKEN, target)
        assert ok.status_code == 303 and ok.headers["location"] == target
        cookie = ok.headers["set-cookie"]
        assert cookie.startswith(f"{SESSION_COOKIE}=")
        for attribute in ("HttpOnly", "SameSite=strict", "Path=/"):
            assert attribute.lower() in cookie.lower(), cookie
        assert ALICE_TOKEN not in cookie

        page = await gated.client.get(target)
        assert page.status_code == 200 and "trainer-0" in page.text
        assert 'id="name"' not in page.text and "<strong>alice</strong>" in page.text
        assert (await gated.client.get("/")).status_code == 200
        r = await gated.client.post(
            f"{target}/moves", data={"csrf": csrf_of(page.text), "name": "mallory", **CONFIRMED_APPROVE}
        )
        assert r.status_code == 303 and r.headers["location"].endswith("?done=approve")
        (approval,) = await gated.rt.repo.approvals_of(rem.id)
        assert approval.decision == "approved" and approval.decided_by == "alice" and approval.decision_source == "ui"
        actors = {(e.kind, e.actor) for e in await gated.rt.repo.list_audit(remediation_id=rem.id)}
        assert ("state.running", "alice") in actors

        signed = await gated.client.get("/login")
        assert 'id="signed-in"' in signed.text
        out = await gated.client.post("/logout", data={"csrf": csrf_of(signed.text.split('action="/logout"')[1])})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        assert SESSION_COOKIE not in gated.client.cookies
        assert_sign_in_redirect(await gated.client.get(target), rem.id)


async def test_trusted_proxy_header_signs_in_and_names_the_approver(tmp_path: Path) -> None:
    async with gated_controller(
        tmp_path, listen_host=PUBLIC, peer=PROXY, approver_header=HEADER, trusted_proxies=["10.0.0.0/24"],
        approvers=["alice@example.com"],
    ) as gated:
        rem = await gated.fire()
        target = f"/remediations/{rem.id}"
        assert_sign_in_redirect(await gated.client.get(target), rem.id)
        who = {HEADER: "alice@example.com"}
        page = await gated.client.get(target, headers=who)
        assert page.status_code == 200 and "trainer-0" in page.text and 'id="name"' not in page.text
        r = await gated.client.post(
            f"{target}/moves",
            data={"csrf": csrf_of(page.text), "name": "mallory", **CONFIRMED_APPROVE},
            headers=who,
        )
        assert r.status_code == 303, r.text
        (approval,) = await gated.rt.repo.approvals_of(rem.id)
        assert approval.decided_by == "alice@example.com" and approval.decision_source == "ui"


async def test_the_proxy_header_from_another_peer_decides_nothing(tmp_path: Path) -> None:
    async with gated_controller(
        tmp_path, listen_host=PUBLIC, peer="10.9.9.9", approver_header=HEADER, trusted_proxies=[PROXY]
    ) as gated:
        rem = await gated.fire()
        before = await snapshot(gated, rem.id)
        who = {HEADER: "alice@example.com"}
        assert_sign_in_redirect(await gated.client.get(f"/remediations/{rem.id}", headers=who), rem.id)
        csrf = forged_csrf(gated.client, f"ui:{rem.id}")
        r = await gated.client.post(
            f"/remediations/{rem.id}/moves", data={"csrf": csrf, **CONFIRMED_APPROVE}, headers=who
        )
        assert_sign_in_redirect(r)
        # Nor does it name the approver on an approval link or through the API.
        token = await gated.token()
        page = await gated.client.get(f"/approvals/{token}", headers=who)
        r = await gated.client.post(
            f"/approvals/{token}", data={"csrf": csrf_of(page.text), "decision": "approve"}, headers=who
        )
        assert r.status_code == 403 and "did not say who you are" in r.text
        r = await gated.client.post(f"/api/v1/remediations/{rem.id}/approve", headers={**AUTH, **who})
        assert r.status_code == 200 and r.json()["state"] == "running"
        (approval,) = await gated.rt.repo.approvals_of(rem.id)
        assert approval.decided_by == "api"
        assert before[0] == "awaiting_approval"  # nothing above it was decided


async def test_loopback_ui_stays_open_and_prefers_the_signed_in_name(tmp_path: Path) -> None:
    async with gated_controller(tmp_path, ui_tokens=[f"alice:{ALICE_TOKEN}"]) as gated:
        rem = await gated.fire()
        target = f"/remediations/{rem.id}"
        assert (await gated.client.get("/")).status_code == 200
        assert 'id="sign-in-needed"' in (await gated.client.get(target)).text
        assert (await login(gated, ALICE_TOKEN, target)).status_code == 303
        page = await gated.client.get(target)
        r = await gated.client.post(
            f"{target}/moves", data={"csrf": csrf_of(page.text), "name": "mallory", **CONFIRMED_REJECT}
        )
        assert r.status_code == 303
        (approval,) = await gated.rt.repo.approvals_of(rem.id)
        assert approval.decided_by == "alice"


def test_sessions_expire_and_end_when_their_token_is_removed(tmp_path: Path) -> None:
    from starlette.requests import Request
    from starlette.responses import Response

    now = [1_000_000.0]

    def sign_in(tokens: list[str], secret: str = "s" * 32) -> SignIn:
        settings = Settings(ui_tokens=tokens, session_secret=secret, session_ttl="1h")
        return SignIn(settings, required=True, fallback_key=b"k", clock=lambda: now[0])

    def request_with(cookie: str) -> Request:
        return Request({"type": "http", "headers": [(b"cookie", f"{SESSION_COOKIE}={cookie}".encode())]})

    issuer = sign_in([f"alice:{ALICE_TOKEN}"])
    response = Response()
    issuer.start_session(response, "alice", ALICE_TOKEN)
    cookie = response.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    def name_of(issuer: SignIn, cookie: str) -> str | None:
        found = issuer.session(request_with(cookie))
        return found.name if found is not None else None

    assert name_of(issuer, cookie) == "alice"
    assert name_of(sign_in([f"alice:{ALICE_TOKEN}", f"bob:{BOB_TOKEN}"]), cookie) == "alice"
    assert name_of(sign_in([f"alice:{BOB_TOKEN}"]), cookie) is None  # token rotated
    assert name_of(sign_in([f"alice:{ALICE_TOKEN}"], secret="t" * 32), cookie) is None
    name, expires, session_id, signature = cookie.split(".")
    assert name_of(issuer, f"Ym9i.{expires}.{session_id}.{signature}") is None  # renamed to bob
    assert name_of(issuer, f"{name}.{int(expires) + 9999}.{session_id}.{signature}") is None
    assert name_of(issuer, f"{name}.{expires}.{'x' * 22}.{signature}") is None  # another session's id
    now[0] += 3601
    assert name_of(issuer, cookie) is None


@pytest.mark.parametrize(
    ("given", "expected"),
    [("/remediations/x?y=1", "/remediations/x?y=1"), ("//evil.example/", "/"), ("https://evil.example", "/"),
     ("/\\evil.example", "/"), ("", "/"), (None, "/")],
)
def test_login_returns_only_to_local_paths(given: str | None, expected: str) -> None:
    assert safe_next(given) == expected


def test_settings_refuse_short_ui_tokens_and_bad_proxy_addresses() -> None:
    with pytest.raises(ValueError, match="shorter than 16"):
        Settings(ui_tokens=["alice:short"])
    with pytest.raises(ValueError, match="name:token"):
        Settings(ui_tokens=[ALICE_TOKEN])
    with pytest.raises(ValueError, match="TRUSTED_PROXIES"):
        Settings(trusted_proxies=["proxy.example"])
    assert Settings(ui_tokens=f"alice:{ALICE_TOKEN}, bob:{BOB_TOKEN}").ui_tokens == [
        f"alice:{ALICE_TOKEN}", f"bob:{BOB_TOKEN}"
    ]


@pytest.mark.parametrize(("host", "required"), [("0.0.0.0", True), ("10.1.2.3", True), ("127.0.0.1", False)])
def test_serve_tells_the_app_where_it_listens(
    host: str, required: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    from remediator.cli.main import app as cli

    served: dict[str, Any] = {}

    def run(server: uvicorn.Server) -> None:  # record what would be served instead of listening
        config = server.config
        served.update(app=config.app, host=config.host, proxy_headers=config.proxy_headers)
        server.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    monkeypatch.setenv("REMEDIATOR_WEBHOOK_TOKEN", "hook-token")
    monkeypatch.setenv("REMEDIATOR_AUDIT_KEY", "k" * 40)
    monkeypatch.setenv("REMEDIATOR_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'c.db'}")
    result = CliRunner().invoke(cli, ["serve", "--host", host, "--port", "8080"])
    assert result.exit_code == 0, result.output
    assert served["host"] == host and served["proxy_headers"] is False
    assert served["app"].state.sign_in.required is required

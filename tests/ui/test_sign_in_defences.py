"""Sign-in defences over real HTTP (uvicorn on 127.0.0.1, clients bound to other loopback addresses):

- the approver header is believed only from a trusted proxy, never from a plain client, and `serve` refuses
  to start with the header set and no trusted proxies;
- `POST /logout` revokes the session in the database: the old cookie stops working at once, on another
  replica and after a restart, even when a copy of it is replayed;
- `POST /login` is rate-limited per account and per client address (429 with Retry-After, audited), while
  another person signs in at once;
- a UI token's minimum length counts what is left after surrounding whitespace is stripped.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.api.csrf import COOKIE, Csrf
from remediator.api.sign_in_limit import SignInLimiter
from remediator.api.signin import SESSION_COOKIE
from remediator.engine.runtime import Runtime
from remediator.settings import Settings
from tests.approvals.harness import TOKEN, settings_for
from tests.controller_process import ROOT, free_port
from tests.helpers import am_alert, am_payload, xid_labels
from tests.ui.live import live_controller

# A confirmed approve or reject from the remediation page's move form (the confirmation page's hidden fields).
CONFIRMED_APPROVE = {"action": "approve", "confirmed": "yes", "seen_state": "awaiting_approval"}


HEADER = "X-Forwarded-Email"
ALICE_TOKEN = "alice-ui-token-0123456789abcdef"
BOB_TOKEN = "bob-ui-token-0123456789abcdef"
SESSION_SECRET = "session-secret-0123456789abcdef"

pytestmark = pytest.mark.timeout(120)


def client_at(base: str, address: str = "127.0.0.1", **kwargs: Any) -> httpx.AsyncClient:
    """An HTTP client whose connections come from `address` (any 127.0.0.0/8 address is this host)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=base, transport=transport, follow_redirects=False, **kwargs)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match, html
    return match.group(1)


async def alert_awaiting_approval(base: str, rt: Runtime) -> str:
    """Fire the gated test alert through the webhook and wait until its remediation asks for a decision."""
    body = am_payload(am_alert(xid_labels("gpu-node-1", 79, pod="trainer-0", namespace="ml")))
    async with client_at(base, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        assert (await api.post("/api/v1/alerts", json=body)).status_code == 200
        async with asyncio.timeout(30):
            while True:
                listed = (await api.get("/api/v1/remediations")).json()
                if listed and listed[0]["state"] == "awaiting_approval":
                    return str(listed[0]["id"])
                await asyncio.sleep(0.05)


def serve_once(env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`remediator serve` as a real process on a free loopback port; it must stop by itself."""
    return subprocess.run(
        [sys.executable, "-m", "remediator.cli", "serve", "--host", "127.0.0.1", "--port", str(free_port())],
        capture_output=True, text=True, timeout=timeout, cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


# --- the approver header -------------------------------------------------------------------------------------


def test_serve_refuses_an_approver_header_without_trusted_proxies(tmp_path: Path) -> None:
    result = serve_once({
        "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
        "REMEDIATOR_APPROVER_HEADER": HEADER,
        "REMEDIATOR_TRUSTED_PROXIES": "",
    })
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "REMEDIATOR_APPROVER_HEADER" in lines[0] and "REMEDIATOR_TRUSTED_PROXIES" in lines[0]
    assert not (tmp_path / "c.db").exists()  # refused before anything was opened


async def test_the_approver_header_from_a_plain_client_is_never_believed(tmp_path: Path) -> None:
    # An app built without `serve`'s start-up check (e.g. embedded) still never believes the header.
    served = live_controller(
        lambda base: settings_for(tmp_path, public_url=base, approver_header=HEADER), listen_host="0.0.0.0"
    )
    async with served as (base, rt):
        rem_id = await alert_awaiting_approval(base, rt)
        claim = {HEADER: "admin@corp"}
        async with client_at(base, headers=claim) as plain:
            page = await plain.get(f"/remediations/{rem_id}")
            assert page.status_code == 303 and page.headers["location"].startswith("/login?next=")
            assert "trainer-0" not in page.text
            nonce = "n" * 32
            plain.cookies.set(COOKIE, nonce)
            csrf = Csrf(b"test-secret-key", secure_cookie=False).token(nonce, f"ui:{rem_id}")
            r = await plain.post(f"/remediations/{rem_id}/moves", data={"csrf": csrf, **CONFIRMED_APPROVE})
            assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
            login = await plain.get("/login")
            assert 'id="signed-in"' not in login.text and "admin@corp" not in login.text
            rem = await rt.repo.get(rem_id)
            assert rem is not None and rem.state == "awaiting_approval"
            # The bearer API does not record the header's name either.
            r = await plain.post(
                f"/api/v1/remediations/{rem_id}/approve", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert r.status_code == 200, r.text
        (approval,) = await rt.repo.approvals_of(rem_id)
        assert approval.decided_by == "api"
        assert "admin@corp" not in {e.actor for e in await rt.repo.list_audit(limit=10_000)}


async def test_the_approver_header_is_believed_from_the_trusted_proxy_only(tmp_path: Path) -> None:
    served = live_controller(
        lambda base: settings_for(tmp_path, public_url=base, approver_header=HEADER, trusted_proxies=["127.0.0.1"]),
        listen_host="0.0.0.0",
    )
    async with served as (base, rt):
        rem_id = await alert_awaiting_approval(base, rt)
        claim = {HEADER: "admin@corp"}
        async with client_at(base, "127.0.0.2", headers=claim) as outsider:
            assert (await outsider.get(f"/remediations/{rem_id}")).status_code == 303
        async with client_at(base, "127.0.0.1", headers=claim) as proxy:
            page = await proxy.get(f"/remediations/{rem_id}")
            assert page.status_code == 200 and "<strong>admin@corp</strong>" in page.text
            r = await proxy.post(
                f"/remediations/{rem_id}/moves", data={"csrf": csrf_of(page.text), **CONFIRMED_APPROVE}
            )
            assert r.status_code == 303 and r.headers["location"].endswith("?done=approve")
        (approval,) = await rt.repo.approvals_of(rem_id)
        assert approval.decided_by == "admin@corp"


# --- sign-out ------------------------------------------------------------------------------------------------


def token_settings(tmp_path: Path, base: str, **extra: Any) -> Settings:
    return settings_for(
        tmp_path, public_url=base, ui_tokens=[f"alice:{ALICE_TOKEN}", f"bob:{BOB_TOKEN}"],
        session_secret=SESSION_SECRET, **extra,
    )


@asynccontextmanager
async def token_controller(tmp_path: Path, **extra: Any) -> AsyncIterator[tuple[str, Runtime]]:
    async with live_controller(lambda base: token_settings(tmp_path, base, **extra), listen_host="0.0.0.0") as served:
        yield served


async def sign_in(client: httpx.AsyncClient, name: str, token: str) -> httpx.Response:
    page = await client.get("/login")
    assert page.status_code == 200, page.text
    return await client.post("/login", data={"csrf": csrf_of(page.text), "name": name, "token": token})


async def session_cookie(base: str, name: str, token: str) -> str:
    async with client_at(base) as client:
        r = await sign_in(client, name, token)
        assert r.status_code == 303, r.text
        return str(client.cookies[SESSION_COOKIE])


async def home_with(base: str, cookie: str) -> int:
    """The status of `/` for a client that presents only this session cookie (a replayed copy)."""
    async with client_at(base, cookies={SESSION_COOKIE: cookie}) as client:
        return (await client.get("/")).status_code


async def test_logout_revokes_the_session_on_every_replica_and_after_a_restart(tmp_path: Path) -> None:
    async with token_controller(tmp_path) as (base_a, rt_a), token_controller(tmp_path) as (base_b, _):
        signed_out = await session_cookie(base_a, "alice", ALICE_TOKEN)
        kept = await session_cookie(base_a, "alice", ALICE_TOKEN)
        assert signed_out != kept
        assert await home_with(base_a, signed_out) == 200 and await home_with(base_b, signed_out) == 200
        async with client_at(base_a, cookies={SESSION_COOKIE: signed_out}) as client:
            page = await client.get("/login")
            logout_csrf = csrf_of(page.text.split('action="/logout"')[1])
            r = await client.post("/logout", data={"csrf": logout_csrf})
            assert r.status_code == 303 and r.headers["location"] == "/login"
            cleared = [c for c in r.headers.get_list("set-cookie") if c.startswith(f"{SESSION_COOKIE}=")]
            assert cleared and "max-age=0" in cleared[0].lower()  # the browser drops it; a copy is refused below
        # The copy kept from before the sign-out is refused at once, here and on the other replica.
        assert await home_with(base_a, signed_out) == 303
        assert await home_with(base_b, signed_out) == 303
        assert await home_with(base_b, kept) == 200  # only the signed-out session ends
        events = [e for e in await rt_a.repo.list_audit(limit=10_000) if e.kind.startswith("ui.")]
        assert [(e.kind, e.actor) for e in events] == [
            ("ui.signed_in", "alice"), ("ui.signed_in", "alice"), ("ui.signed_out", "alice"),
        ]
        assert events[-1].data == {"client": "127.0.0.1"}
    async with token_controller(tmp_path) as (base_c, _):  # a restart: a new process on the same database
        assert await home_with(base_c, signed_out) == 303
        assert await home_with(base_c, kept) == 200


# --- sign-in rate limits -------------------------------------------------------------------------------------


async def attempt(base: str, address: str, name: str, token: str) -> httpx.Response:
    async with client_at(base, address) as client:
        return await sign_in(client, name, token)


async def test_sign_in_is_limited_per_account_and_per_client_and_audited(tmp_path: Path) -> None:
    async with token_controller(tmp_path) as (base, rt):
        # Five wrong tokens for alice from one address: each is checked and refused (401).
        for i in range(5):
            r = await attempt(base, "127.0.0.2", "alice", f"guess-{i:026d}")
            assert r.status_code == 401, (i, r.status_code)
        # The sixth is refused before the token is looked at, even the right one, from any address.
        for address in ("127.0.0.2", "127.0.0.3"):
            r = await attempt(base, address, "alice", ALICE_TOKEN)
            assert r.status_code == 429, r.text
            assert 290 <= int(r.headers["retry-after"]) <= 300  # one account window: 5 minutes
            assert SESSION_COOKIE not in r.headers.get("set-cookie", "")
            assert "Try again in" in r.text
        # Bob signs in at once, from the attacker's address too, while alice's account is locked.
        started = time.monotonic()
        for address in ("127.0.0.3", "127.0.0.2"):
            assert (await attempt(base, address, "bob", BOB_TOKEN)).status_code == 303
        assert time.monotonic() - started < 5

        # Twenty failures from one address within a minute lock that address, for every name.
        for i in range(20):
            r = await attempt(base, "127.0.0.4", f"user-{i}", f"guess-{i:026d}")
            assert r.status_code == 401, (i, r.status_code)
        r = await attempt(base, "127.0.0.4", "bob", BOB_TOKEN)
        assert r.status_code == 429 and 50 <= int(r.headers["retry-after"]) <= 60
        assert (await attempt(base, "127.0.0.5", "bob", BOB_TOKEN)).status_code == 303

        events = [e for e in await rt.repo.list_audit(limit=10_000) if e.kind.startswith("ui.sign_in")]
        refused = [e for e in events if e.kind == "ui.sign_in_refused"]
        assert [(e.data["client"], e.data["account"], e.data["locked"]) for e in refused] == [
            ("127.0.0.2", "alice", "account"), ("127.0.0.3", "alice", "account"), ("127.0.0.4", "bob", "client"),
        ]
        assert all(e.actor == "anonymous" and e.data["retry_after_s"] > 0 for e in refused)
        failed = [e for e in events if e.kind == "ui.sign_in_failed"]
        assert len(failed) == 25 and failed[0].data == {"client": "127.0.0.2", "account": "alice"}


async def test_sign_in_limits_count_the_client_behind_a_trusted_proxy(tmp_path: Path) -> None:
    """Behind the sign-in proxy every connection comes from the proxy: the limit counts the address the
    proxy saw (X-Forwarded-For), so one client's guesses do not lock out everyone behind the proxy."""
    async with token_controller(
        tmp_path, approver_header=HEADER, trusted_proxies=["127.0.0.1"], sign_in_client_failures=3,
    ) as (base, _):
        async def via_proxy(client_address: str, name: str, token: str) -> int:
            headers = {"X-Forwarded-For": f"203.0.113.9, {client_address}"}  # first hop: what the client wrote
            async with client_at(base, "127.0.0.1", headers=headers) as client:
                return (await sign_in(client, name, token)).status_code

        assert [await via_proxy("198.51.100.7", f"u{i}", "x" * 20) for i in range(4)] == [401, 401, 401, 429]
        assert await via_proxy("198.51.100.8", "bob", BOB_TOKEN) == 303
        # A direct client cannot pick its address by writing the header: it is counted by its own address.
        async with client_at(base, "127.0.0.6", headers={"X-Forwarded-For": "198.51.100.8"}) as direct:
            assert [(await sign_in(direct, f"v{i}", "y" * 20)).status_code for i in range(4)] == [401] * 3 + [429]
        assert await via_proxy("198.51.100.8", "bob", BOB_TOKEN) == 303


def test_lockouts_grow_exponentially_up_to_the_maximum_and_start_over_after_a_quiet_spell() -> None:
    now = [0.0]
    settings = Settings(
        sign_in_account_failures=2, sign_in_account_window="1m", sign_in_client_failures=1000,
        sign_in_lockout_max="10m",
    )
    limiter = SignInLimiter(settings, clock=lambda: now[0])

    def lock_alice() -> int:
        for _ in range(2):
            assert limiter.refusal("c", "alice") is None
            limiter.failed("c", "alice")
        refusal = limiter.refusal("c", "alice")
        assert refusal is not None and refusal.kind == "account"
        now[0] += refusal.retry_after
        assert limiter.refusal("c", "alice") is None
        return refusal.retry_after

    assert [lock_alice() for _ in range(6)] == [60, 120, 240, 480, 600, 600]
    now[0] += 601  # quiet for a whole maximum lockout
    assert lock_alice() == 60
    limiter.failed("c", "alice")
    limiter.succeeded("alice")  # a successful sign-in clears the account's failures
    limiter.failed("c", "alice")
    assert limiter.refusal("c", "alice") is None
    bounded = SignInLimiter(settings, clock=lambda: now[0], max_keys=3)
    for i in range(10):
        bounded.failed(f"10.0.0.{i}", f"name-{i}")
    assert all(len(table._keys) == 3 for table in bounded._tables.values())


# --- UI token length -----------------------------------------------------------------------------------------


def test_serve_refuses_a_ui_token_that_is_short_once_whitespace_is_stripped(tmp_path: Path) -> None:
    padded = "alice:   short-token    "  # 24 characters as written, 11 as used
    with pytest.raises(ValueError, match="shorter than 16"):
        Settings(ui_tokens=[padded])
    result = serve_once({
        "REMEDIATOR_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'c.db'}",
        "REMEDIATOR_UI_TOKENS": padded,
    })
    assert result.returncode == 2, result.stdout + result.stderr
    assert "UI_TOKENS" in result.stderr and "shorter than 16" in result.stderr
    assert Settings(ui_tokens=[f"alice:  {ALICE_TOKEN}  "]).ui_tokens  # padding around a long token is fine

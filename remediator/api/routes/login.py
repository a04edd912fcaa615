"""`/login` and `/logout`: exchanging a name and its personal UI token for a session cookie, and ending it.

`GET /login` says who you are signed in as, or offers the sign-in form (when `REMEDIATOR_UI_TOKENS` is set)
and explains the sign-in proxy (when `REMEDIATOR_APPROVER_HEADER` is set). `POST /login` is CSRF-checked like
every form and rate-limited per client address and per account (api/sign_in_limit.py: 429 with Retry-After,
before the token is looked at); it compares the token in constant time against every configured one, and on
success sets the session cookie and returns to the page that asked (a local path only). Every sign-in, failed
sign-in and refusal is an audit event (`ui.signed_in`, `ui.sign_in_failed`, `ui.sign_in_refused`).
`POST /logout` revokes the session in the database (audited as `ui.signed_out`) and clears the cookie.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from remediator.api.deps import runtime_of
from remediator.api.routes.approvals import csrf_of, message_page
from remediator.api.sign_in_limit import SignInLimiter
from remediator.api.signin import safe_next, sign_in_of
from remediator.api.templating import page

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["ui"], include_in_schema=False)

ANONYMOUS = "anonymous"  # the audit actor of a sign-in attempt that named nobody it could prove


def limiter_of(request: Request) -> SignInLimiter:
    limiter: SignInLimiter = request.app.state.sign_in_limiter
    return limiter


async def _login_page(
    request: Request, target: str, *, error: str | None = None, status_code: int = 200, typed: str = "",
    headers: dict[str, str] | None = None,
) -> Response:
    sign_in = sign_in_of(request)
    csrf = csrf_of(request)
    nonce, fresh = csrf.nonce(request)
    session = await sign_in.session_identity(request)
    who = await sign_in.who(request)
    context = {
        "who": who,
        "signed_in": who,
        "nav_here": "/login",
        "session": session is not None,
        "next": target,
        "csrf": csrf.token(nonce, "login"),
        "logout_csrf": csrf.token(nonce, "logout"),
        "token_login": sign_in.token_login,
        "header": sign_in.header,
        "required": sign_in.required,
        "error": error,
        "typed": typed,
    }
    response = page("login.html", context, status_code)
    if headers:
        response.headers.update(headers)
    if fresh:
        csrf.set_cookie(response, nonce)
    return response


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: Annotated[str | None, Query(max_length=2000)] = None) -> Response:
    return await _login_page(request, safe_next(next))


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    form = await request.form()
    field, typed_name, token, target = (str(form.get(k) or "") for k in ("csrf", "name", "token", "next"))
    target = safe_next(target)
    if not csrf_of(request).valid(request, field, "login"):
        return message_page(
            "Form could not be verified",
            "The sign-in form did not carry a valid security token for this browser (cookies may be blocked). "
            "Open the sign-in page again.",
            403,
            link=f"/login?next={target}" if target != "/" else "/login",
        )
    sign_in = sign_in_of(request)
    repo = runtime_of(request).repo
    limiter = limiter_of(request)
    client = sign_in.client_address(request)
    account = typed_name.strip()[:100]
    shown = account if account.isprintable() else ""
    refusal = limiter.refusal(client, account)
    if refusal is not None:
        log.warning(
            "refused a UI sign-in from %s for %r: too many failed sign-ins (this %s is locked for %d s)",
            client, account, refusal.kind, refusal.retry_after,
        )
        await repo.record_audit("ui.sign_in_refused", actor=ANONYMOUS, data={
            "client": client, "account": account, "locked": refusal.kind, "retry_after_s": refusal.retry_after,
        })
        return await _login_page(
            request, target, status_code=429, typed=shown, headers={"Retry-After": str(refusal.retry_after)},
            error=f"Too many failed sign-ins from this address or for this name; nothing was checked. "
                  f"Try again in {refusal.retry_after} seconds.",
        )
    token = token.strip()
    name = sign_in.check_token(account, token) if account and token and len(token) <= 500 else None
    if name is None:
        limiter.failed(client, account)
        log.warning(
            "refused a UI sign-in from %s for %r: not a name and token of REMEDIATOR_UI_TOKENS", client, account
        )
        await repo.record_audit("ui.sign_in_failed", actor=ANONYMOUS, data={"client": client, "account": account})
        return await _login_page(
            request, target, error="That name and token do not match; nobody was signed in.", status_code=401,
            typed=shown,
        )
    limiter.succeeded(name)
    log.info("UI sign-in: %s from %s", name, client)
    await repo.record_audit("ui.signed_in", actor=name, data={"client": client})
    response = RedirectResponse(target, status_code=303)
    sign_in.start_session(response, name, token)
    return response


@router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request) -> Response:
    form = await request.form()
    if not csrf_of(request).valid(request, str(form.get("csrf") or ""), "logout"):
        return message_page(
            "Form could not be verified", "Open the sign-in page again to sign out.", 403, link="/login"
        )
    response = RedirectResponse("/login", status_code=303)
    name = await sign_in_of(request).end_session(request, response)
    if name is not None:
        log.info("UI sign-out: %s", name)
    return response

"""`/login` and `/logout`: exchanging a personal UI token for a session cookie, and ending it.

`GET /login` says who you are signed in as, or offers a token form (when `REMEDIATOR_UI_TOKENS` is set) and
explains the sign-in proxy (when `REMEDIATOR_APPROVER_HEADER` is set). `POST /login` is CSRF-checked like
every form, compares the token in constant time against every configured one, and on success sets the
session cookie and returns to the page that asked (a local path only). `POST /logout` clears the cookie.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from remediator.api.routes.approvals import csrf_of, message_page
from remediator.api.signin import SESSION_COOKIE, safe_next, sign_in_of
from remediator.api.templating import page

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["ui"], include_in_schema=False)


def _login_page(request: Request, target: str, *, error: str | None = None, status_code: int = 200) -> Response:
    sign_in = sign_in_of(request)
    csrf = csrf_of(request)
    nonce, fresh = csrf.nonce(request)
    session = sign_in.session_identity(request)
    context = {
        "who": sign_in.who(request),
        "signed_in": sign_in.who(request),
        "nav_here": "/login",
        "session": session is not None,
        "next": target,
        "csrf": csrf.token(nonce, "login"),
        "logout_csrf": csrf.token(nonce, "logout"),
        "token_login": sign_in.token_login,
        "header": sign_in.header,
        "required": sign_in.required,
        "error": error,
    }
    response = page("login.html", context, status_code)
    if fresh:
        csrf.set_cookie(response, nonce)
    return response


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: Annotated[str | None, Query(max_length=2000)] = None) -> Response:
    return _login_page(request, safe_next(next))


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    form = await request.form()
    field, token, target = (str(form.get(k) or "") for k in ("csrf", "token", "next"))
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
    name = sign_in.check_token(token.strip()) if token.strip() and len(token) <= 500 else None
    if name is None:
        peer = request.client.host if request.client else "unknown"
        log.warning("refused a UI sign-in from %s: the token is not in REMEDIATOR_UI_TOKENS", peer)
        return _login_page(request, target, error="That token is not valid; nobody was signed in.", status_code=401)
    log.info("UI sign-in: %s", name)
    response = RedirectResponse(target, status_code=303)
    sign_in.start_session(response, name, token.strip())
    return response


@router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request) -> Response:
    form = await request.form()
    if not csrf_of(request).valid(request, str(form.get("csrf") or ""), "logout"):
        return message_page(
            "Form could not be verified", "Open the sign-in page again to sign out.", 403, link="/login"
        )
    response = RedirectResponse("/login", status_code=303)
    if request.cookies.get(SESSION_COOKIE):
        sign_in_of(request).end_session(response)
    return response

"""CSRF protection for the HTML forms (approval page and web UI): a signed double-submit cookie.

Each browser gets a random nonce in a `SameSite=Strict`, HttpOnly cookie; every form carries
HMAC(secret_key, purpose|nonce) in a hidden field, where the purpose names what the form acts on
(`approval:<token hash>` or `ui:<remediation id>`). A POST is accepted only when the cookie came back and the
field matches it, so another site can neither send the cookie (SameSite) nor forge the field (no key).
The key is `REMEDIATOR_SECRET_KEY`, shared by replicas; without it each process draws a random one.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from fastapi import Request, Response

__all__ = ["COOKIE", "Csrf"]

COOKIE = "remediator_csrf"
_NONCE = re.compile(r"^[A-Za-z0-9_-]{22,64}$")


class Csrf:
    """Issues and checks form tokens bound to a cookie nonce and a purpose."""

    def __init__(self, key: bytes, *, secure_cookie: bool) -> None:
        self._key = key
        self._secure = secure_cookie

    def nonce(self, request: Request) -> tuple[str, bool]:
        """The browser's nonce, or a fresh one (True: it must be set on the response)."""
        current = request.cookies.get(COOKIE, "")
        if _NONCE.match(current):
            return current, False
        return secrets.token_urlsafe(24), True

    def token(self, nonce: str, purpose: str) -> str:
        return hmac.new(self._key, f"{purpose}|{nonce}".encode(), hashlib.sha256).hexdigest()

    def valid(self, request: Request, field: str | None, purpose: str) -> bool:
        nonce = request.cookies.get(COOKIE, "")
        if not field or not _NONCE.match(nonce):
            return False
        return hmac.compare_digest(self.token(nonce, purpose).encode(), field.encode())

    def set_cookie(self, response: Response, nonce: str) -> None:
        response.set_cookie(
            COOKIE,
            nonce,
            httponly=True,
            samesite="strict",
            secure=self._secure,
            path="/",
            max_age=12 * 3600,
        )

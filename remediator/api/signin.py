"""Who is signed in to the web UI, and whether the UI may be used by someone who is not.

The UI shows everything the bearer-protected API shows and can approve drains and GPU resets, so whenever
the controller listens beyond loopback (or `REMEDIATOR_UI_SIGN_IN=required`) every UI page asks for a
signed-in person. There are two ways to be one:

- a trusted auth proxy names the person in `REMEDIATOR_APPROVER_HEADER`; with `REMEDIATOR_TRUSTED_PROXIES`
  set the header is believed only on connections from those addresses, and ignored from anyone else;
- the `/login` page takes a personal token from `REMEDIATOR_UI_TOKENS` (`name:token`) and sets a session
  cookie (`HttpOnly`, `SameSite=Strict`) holding the name, an expiry and an HMAC over both and a hash of
  the token, so removing a token from the list ends the sessions it opened.

On loopback binds without `required` the UI stays open; a decision is then recorded under the signed-in
identity when there is one, else under the typed name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import logging
import time
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request, Response

from remediator.settings import Settings

__all__ = ["SESSION_COOKIE", "SignIn", "SignInRequired", "SignedIn", "require_sign_in", "safe_next", "sign_in_of"]

log = logging.getLogger(__name__)

SESSION_COOKIE = "remediator_session"


class SignInRequired(Exception):
    """Raised by UI routes for a visitor who must sign in first; answered with a redirect to /login."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unb64(text: str) -> str:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


def _fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class SignIn:
    """Resolves the signed-in identity of a request and issues and checks session cookies."""

    def __init__(
        self,
        settings: Settings,
        *,
        required: bool,
        fallback_key: bytes,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.required = required
        self.header = settings.approver_header
        base = (settings.session_secret or settings.secret_key or "").encode() or fallback_key
        # A key of its own, derived so that it never equals the CSRF key even when both come from SECRET_KEY.
        self._key = hmac.new(base, b"remediator ui session", hashlib.sha256).digest()
        self._tokens = [
            (name.strip(), token.strip()) for name, _, token in (t.partition(":") for t in settings.ui_tokens)
        ]
        self._proxies = [ipaddress.ip_network(p, strict=False) for p in settings.trusted_proxies]
        self._ttl = int(settings.session_ttl.total_seconds())
        self._secure = settings.public_url.startswith("https://")
        self._clock = clock

    @property
    def token_login(self) -> bool:
        """True when the /login page can sign anyone in (UI tokens are configured)."""
        return bool(self._tokens)

    @property
    def possible(self) -> bool:
        """True when there is any way to sign in (a proxy header or UI tokens)."""
        return bool(self.header) or self.token_login

    def trusted_peer(self, request: Request) -> bool:
        """True when the connection may carry the approver header (no proxies listed: any peer)."""
        if not self._proxies:
            return True
        if request.client is None:
            return False
        try:
            peer = ipaddress.ip_address(request.client.host)
        except ValueError:
            return False
        return any(peer in net for net in self._proxies)

    def header_identity(self, request: Request) -> str | None:
        """The person the trusted proxy names, or None (no header configured, absent, or untrusted peer)."""
        if not self.header:
            return None
        value = (request.headers.get(self.header) or "").strip()
        if not value or not self.trusted_peer(request):
            return None
        return value[:200]

    def session_identity(self, request: Request) -> str | None:
        """The name in a valid, unexpired session cookie whose token is still configured, or None."""
        raw = request.cookies.get(SESSION_COOKIE, "")
        parts = raw.split(".")
        if len(parts) != 3 or not self._tokens:
            return None
        encoded, expires_text, signature = parts
        try:
            name = _unb64(encoded)
            expires = int(expires_text)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        if expires <= self._clock():
            return None
        ok = False
        for token_name, token in self._tokens:
            if token_name == name:
                expected = self._sign(name, expires, token)
                ok |= hmac.compare_digest(expected.encode(), signature.encode())
        return name if ok else None

    def who(self, request: Request) -> str | None:
        """The signed-in person: the trusted proxy header first, then the session cookie."""
        return self.header_identity(request) or self.session_identity(request)

    def check_token(self, given: str) -> str | None:
        """The name a UI token belongs to (constant-time over every configured token), or None."""
        found: str | None = None
        for name, token in self._tokens:
            if hmac.compare_digest(given.encode(), token.encode()):
                found = name
        return found

    def start_session(self, response: Response, name: str, token: str) -> None:
        expires = int(self._clock()) + self._ttl
        value = f"{_b64(name)}.{expires}.{self._sign(name, expires, token)}"
        response.set_cookie(
            SESSION_COOKIE, value, httponly=True, samesite="strict", secure=self._secure, path="/",
            max_age=self._ttl,
        )

    def end_session(self, response: Response) -> None:
        response.delete_cookie(SESSION_COOKIE, httponly=True, samesite="strict", secure=self._secure, path="/")

    def _sign(self, name: str, expires: int, token: str) -> str:
        message = f"session|{name}|{expires}|{_fingerprint(token)}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()


def sign_in_of(request: Request) -> SignIn:
    sign_in: SignIn = request.app.state.sign_in
    return sign_in


def safe_next(target: str | None) -> str:
    """A local path to return to after signing in (anything else, e.g. `//evil.example`, becomes `/`)."""
    target = (target or "").strip()
    if not target.startswith("/") or target.startswith("//") or "\\" in target or not target.isprintable():
        return "/"
    return target[:2000]


async def require_sign_in(request: Request) -> str | None:
    """UI route dependency: the signed-in person, None on an open (loopback) UI, or SignInRequired."""
    sign_in = sign_in_of(request)
    who = sign_in.who(request)
    if who is None and sign_in.required:
        path = request.url.path
        if request.method != "GET":
            path = path.rsplit("/", 1)[0] or "/"  # a form's target: come back to the page that holds it
        elif request.url.query:
            path = f"{path}?{request.url.query}"
        raise SignInRequired(path)
    return who


SignedIn = Annotated[str | None, Depends(require_sign_in)]

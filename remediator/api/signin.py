"""Who is signed in to the web UI, and whether the UI may be used by someone who is not.

The UI shows everything the bearer-protected API shows and can approve drains and GPU resets, so whenever
the controller listens beyond loopback (or `REMEDIATOR_UI_SIGN_IN=required`) every UI page asks for a
signed-in person. There are two ways to be one:

- a trusted auth proxy names the person in `REMEDIATOR_APPROVER_HEADER`; the header is believed only on
  connections from `REMEDIATOR_TRUSTED_PROXIES` and ignored from anyone else (with no trusted proxies it is
  never believed, and `remediator serve` refuses to start with the header set: engine/startup.py);
- the `/login` page takes a name and its personal token from `REMEDIATOR_UI_TOKENS` (`name:token`) and sets
  a session cookie (`HttpOnly`, `SameSite=Strict`) holding the name, an expiry, a random session id and an
  HMAC over them and a hash of the token, so removing a token from the list ends the sessions it opened.
  `POST /logout` stores the session id in the database (store/session_store.py): from then on the cookie
  is refused by every replica, also after a restart, even if a copy of it is replayed.

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
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, Request, Response

from remediator.api.deps import runtime_of
from remediator.errors import SignInRequired
from remediator.settings import Settings

__all__ = [
    "SESSION_COOKIE", "Session", "SignIn", "SignedIn", "require_sign_in", "safe_next", "sign_in_of",
]

log = logging.getLogger(__name__)

SESSION_COOKIE = "remediator_session"
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{22,64}$")
_RESOLVED = "remediator_session_identity"  # request.state: the session's name once looked up (None: none)


@dataclass(frozen=True)
class Session:
    """What a validly signed session cookie says (it may still have been revoked)."""

    name: str
    expires: int
    session_id: str


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
        """True when the connection comes from a trusted proxy (no proxies listed: no peer is trusted)."""
        return self._trusted(request.client.host if request.client else None)

    def _trusted(self, address: str | None) -> bool:
        if not self._proxies or address is None:
            return False
        try:
            peer = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(peer in net for net in self._proxies)

    def client_address(self, request: Request) -> str:
        """The client's address: the TCP peer, or behind trusted proxies the nearest address in
        X-Forwarded-For that is not one of them (the one the proxy saw; what the client wrote is not used)."""
        peer = request.client.host if request.client else "unknown"
        if not self._trusted(peer):
            return peer
        hops = [h.strip() for h in ",".join(request.headers.getlist("x-forwarded-for")).split(",") if h.strip()]
        for hop in reversed(hops):
            if not self._trusted(hop):
                try:
                    return str(ipaddress.ip_address(hop))
                except ValueError:
                    return peer  # a hop the proxies did not write: count it against the proxy
        return peer

    def header_identity(self, request: Request) -> str | None:
        """The person the trusted proxy names, or None (no header configured, absent, or untrusted peer)."""
        if not self.header:
            return None
        value = (request.headers.get(self.header) or "").strip()
        if not value or not self.trusted_peer(request):
            return None
        return value[:200]

    def session(self, request: Request) -> Session | None:
        """The session of a validly signed, unexpired cookie whose token is still configured, or None.

        Says nothing about revocation: `session_identity` also asks the database."""
        raw = request.cookies.get(SESSION_COOKIE, "")
        parts = raw.split(".")
        if len(parts) != 4 or not self._tokens:
            return None
        encoded, expires_text, session_id, signature = parts
        try:
            name = _unb64(encoded)
            expires = int(expires_text)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return None
        if expires <= self._clock() or not _SESSION_ID.match(session_id):
            return None
        ok = False
        for token_name, token in self._tokens:
            if token_name == name:
                expected = self._sign(name, expires, session_id, token)
                ok |= hmac.compare_digest(expected.encode(), signature.encode())
        return Session(name, expires, session_id) if ok else None

    async def session_identity(self, request: Request) -> str | None:
        """The name of a valid session that was not signed out, or None (looked up once per request)."""
        if hasattr(request.state, _RESOLVED):
            resolved: str | None = getattr(request.state, _RESOLVED)
            return resolved
        found = self.session(request)
        name = None
        if found is not None and not await runtime_of(request).repo.session_revoked(found.session_id):
            name = found.name
        setattr(request.state, _RESOLVED, name)
        return name

    async def who(self, request: Request) -> str | None:
        """The signed-in person: the trusted proxy header first, then the session cookie."""
        return self.header_identity(request) or await self.session_identity(request)

    def check_token(self, name: str, given: str) -> str | None:
        """`name` when `given` is its UI token (constant-time over every configured token), else None."""
        found: str | None = None
        for token_name, token in self._tokens:
            if hmac.compare_digest(given.encode(), token.encode()) and token_name == name:
                found = token_name
        return found

    def start_session(self, response: Response, name: str, token: str) -> None:
        expires = int(self._clock()) + self._ttl
        session_id = secrets.token_urlsafe(16)
        value = f"{_b64(name)}.{expires}.{session_id}.{self._sign(name, expires, session_id, token)}"
        response.set_cookie(
            SESSION_COOKIE, value, httponly=True, samesite="strict", secure=self._secure, path="/",
            max_age=self._ttl,
        )

    async def end_session(self, request: Request, response: Response) -> str | None:
        """Revoke the request's session in the database (every replica refuses its cookie from now on) and
        clear the cookie; the name signed out, or None when there was no valid session."""
        found = self.session(request)
        if found is not None:
            await runtime_of(request).repo.revoke_session(
                found.session_id, name=found.name, expires_at=datetime.fromtimestamp(found.expires, UTC),
                client=self.client_address(request),
            )
        response.delete_cookie(SESSION_COOKIE, httponly=True, samesite="strict", secure=self._secure, path="/")
        return found.name if found is not None else None

    def _sign(self, name: str, expires: int, session_id: str, token: str) -> str:
        message = f"session|{name}|{expires}|{session_id}|{_fingerprint(token)}".encode()
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
    who = await sign_in.who(request)
    if who is None and sign_in.required:
        path = request.url.path
        if request.method != "GET":
            path = path.rsplit("/", 1)[0] or "/"  # a form's target: come back to the page that holds it
        elif request.url.query:
            path = f"{path}?{request.url.query}"
        raise SignInRequired(path)
    return who


SignedIn = Annotated[str | None, Depends(require_sign_in)]

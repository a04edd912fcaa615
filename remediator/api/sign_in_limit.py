"""Rate limits on `POST /login`: failed sign-ins per client address and per account, with growing lockouts.

A UI token is a password, and without a limit the form answered 814 guesses a second. Each failed sign-in
counts against the client address and against the account (the name typed on the form). When a key reaches
its limit inside its window (`REMEDIATOR_SIGN_IN_ACCOUNT_FAILURES` per `..._ACCOUNT_WINDOW`, default 5 per
5 minutes; `REMEDIATOR_SIGN_IN_CLIENT_FAILURES` per `..._CLIENT_WINDOW`, default 20 per minute) it is locked
for one window, then two, four, ... up to `REMEDIATOR_SIGN_IN_LOCKOUT_MAX` (default 1 hour) for each further
lockout; a key that stays quiet for that long starts over. While a key is locked, sign-ins through it are
refused (429 with Retry-After) before the token is looked at, so a locked key reveals nothing.

Only the locked client and the locked account are refused: another person signs in at once, from any
address, and a successful sign-in is never slowed (no sleeps; the check is a dictionary lookup). A successful
sign-in clears its account's failures. The counts live in the process: each replica limits on its own, and
a restart forgets them. Each table keeps at most MAX_KEYS entries, the least recently touched dropped first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from remediator.settings import Settings

__all__ = ["MAX_KEYS", "Refusal", "SignInLimiter"]

MAX_KEYS = 50_000

LimitKind = Literal["client", "account"]


@dataclass
class _Key:
    failures: deque[float] = field(default_factory=deque)
    locked_until: float = 0.0
    lockouts: int = 0


@dataclass(frozen=True)
class Refusal:
    """Why a sign-in is refused: which key is locked, and for how many more seconds (at least 1)."""

    kind: LimitKind
    retry_after: int


class _Table:
    """Failures and lockouts of one kind of key, bounded to MAX_KEYS entries (least recently touched go first)."""

    def __init__(self, limit: int, window: float, lockout_max: float, max_keys: int) -> None:
        self.limit = limit
        self.window = window
        self.lockout_max = lockout_max
        self.max_keys = max_keys
        self._keys: OrderedDict[str, _Key] = OrderedDict()

    def locked_for(self, key: str, now: float) -> float:
        entry = self._keys.get(key)
        return entry.locked_until - now if entry is not None and entry.locked_until > now else 0.0

    def fail(self, key: str, now: float) -> None:
        entry = self._keys.pop(key, None) or _Key()
        self._keys[key] = entry  # most recently touched last
        if entry.lockouts and now - entry.locked_until > self.lockout_max:
            entry.lockouts = 0  # quiet for a whole maximum lockout: start over
        while entry.failures and entry.failures[0] <= now - self.window:
            entry.failures.popleft()
        entry.failures.append(now)
        if len(entry.failures) >= self.limit:
            entry.lockouts += 1
            entry.locked_until = now + min(self.window * 2 ** min(entry.lockouts - 1, 32), self.lockout_max)
            entry.failures.clear()
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)

    def clear(self, key: str) -> None:
        self._keys.pop(key, None)


class SignInLimiter:
    """Counts failed sign-ins per client address and per account and says when to refuse one."""

    def __init__(
        self, settings: Settings, *, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS
    ) -> None:
        lockout_max = settings.sign_in_lockout_max.total_seconds()
        self._tables: dict[LimitKind, _Table] = {
            "client": _Table(
                settings.sign_in_client_failures, settings.sign_in_client_window.total_seconds(), lockout_max,
                max_keys,
            ),
            "account": _Table(
                settings.sign_in_account_failures, settings.sign_in_account_window.total_seconds(), lockout_max,
                max_keys,
            ),
        }
        self._clock = clock

    def refusal(self, client: str, account: str) -> Refusal | None:
        """A Refusal when the client or the account is locked now (the longer lock is named), else None."""
        now = self._clock()
        by_client = self._tables["client"].locked_for(client, now)
        by_account = self._tables["account"].locked_for(account, now)
        kind: LimitKind = "client" if by_client >= by_account else "account"
        wait = max(by_client, by_account)
        return Refusal(kind, max(1, math.ceil(wait))) if wait > 0 else None

    def failed(self, client: str, account: str) -> None:
        now = self._clock()
        self._tables["client"].fail(client, now)
        self._tables["account"].fail(account, now)

    def succeeded(self, account: str) -> None:
        self._tables["account"].clear(account)

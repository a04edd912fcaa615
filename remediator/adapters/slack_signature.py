"""Verification of Slack's request signatures (signing secret, version v0).

Slack signs every interactivity request with HMAC-SHA256 over `v0:{timestamp}:{raw body}` and sends the
result as `X-Slack-Signature: v0=<hex>` with `X-Slack-Request-Timestamp`. A request is accepted only when
the timestamp is within five minutes of now (no replays) and the signature matches (constant-time
comparison). This must run on the raw bytes, before the body is parsed or anything is acted on.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable

from remediator.errors import SignatureError

__all__ = ["MAX_SKEW_SECONDS", "sign", "verify"]

MAX_SKEW_SECONDS = 5 * 60


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The `X-Slack-Signature` value Slack would send for this body."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def verify(
    secret: str,
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    *,
    now: Callable[[], float] = time.time,
) -> None:
    """Raise SignatureError unless the headers prove the body came from Slack within the last 5 minutes."""
    if not secret:
        raise SignatureError("no signing secret configured")
    if not timestamp or not signature:
        raise SignatureError("missing X-Slack-Request-Timestamp or X-Slack-Signature")
    try:
        ts = int(timestamp)
    except ValueError:
        raise SignatureError("timestamp is not an integer") from None
    if abs(now() - ts) > MAX_SKEW_SECONDS:
        raise SignatureError("timestamp is more than 5 minutes from now (replay?)")
    expected = sign(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode(), signature.strip().encode()):
        raise SignatureError("signature does not match")

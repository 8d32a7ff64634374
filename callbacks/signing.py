"""Webhook signatures: HMAC-SHA256 over ``"<timestamp>.<body>"`` with the subscription secret.

Receivers recompute the signature, compare in constant time, reject a timestamp outside their
tolerance (replays) and dedupe by the delivery id.
"""

import hashlib
import hmac
import time

SIGNATURE_VERSION = "v1"
HEADER_EVENT = "X-QTG-Event"
HEADER_DELIVERY = "X-QTG-Delivery"
HEADER_TIMESTAMP = "X-QTG-Timestamp"
HEADER_SIGNATURE = "X-QTG-Signature"
DEFAULT_TOLERANCE_SECONDS = 300


def sign(*, secret: str, timestamp: int, body: bytes) -> str:
    """The signature header value for one attempt."""
    message = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


def verify(
    *,
    secret: str,
    timestamp: str | int,
    body: bytes,
    signature: str,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """True when the signature is ours and the timestamp is fresh (what a receiver checks)."""
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - ts) > tolerance:
        return False
    return hmac.compare_digest(sign(secret=secret, timestamp=ts, body=body), signature or "")

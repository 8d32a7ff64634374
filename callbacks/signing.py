"""Webhook signatures per the Standard Webhooks specification (https://www.standardwebhooks.com),
made by the reference ``standardwebhooks`` library so that receivers can verify them with any
stock implementation.

Each attempt carries ``webhook-id`` (the event's id: the same on every retry and redelivery,
receivers dedupe on it), ``webhook-timestamp`` (Unix seconds of the attempt) and
``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``, one
space-separated entry per secret that is valid now (two while a rotated secret overlaps).

Secrets are ``whsec_`` followed by the base64 of at least 32 random bytes.
"""

import base64
import binascii
import hashlib
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

SECRET_PREFIX = "whsec_"
MIN_SECRET_BYTES = 32
HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"

__all__ = [
    "HEADER_ID",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "MIN_SECRET_BYTES",
    "SECRET_PREFIX",
    "WebhookVerificationError",
    "fingerprint",
    "headers",
    "new_secret",
    "secret_key",
    "sign",
    "verify",
]


def new_secret() -> str:
    """A fresh secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(MIN_SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The key bytes of a ``whsec_`` secret; ValueError when it is not one or too short."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a webhook secret starts with {SECRET_PREFIX}")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a webhook secret is whsec_ followed by base64") from None
    if len(key) < MIN_SECRET_BYTES:
        raise ValueError(f"a webhook secret holds at least {MIN_SECRET_BYTES} bytes")
    return key


def fingerprint(secret: str) -> str:
    """What operators see instead of the secret: a short hash of its key bytes."""
    try:
        key = secret_key(secret)
    except ValueError:
        key = (secret or "").encode()
    return "sha256:" + hashlib.sha256(key).hexdigest()[:16]


def sign(*, secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one ``v1,<base64>`` per secret, space-separated."""
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    text = body.decode()
    # Webhook() takes the raw key bytes too; passing them keeps our stricter parsing.
    return " ".join(
        Webhook(secret_key(secret)).sign(msg_id=msg_id, timestamp=when, data=text)
        for secret in secrets
    )


def headers(*, secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt."""
    return {
        HEADER_ID: msg_id,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_SIGNATURE: sign(secrets=secrets, msg_id=msg_id, timestamp=timestamp, body=body),
    }


def verify(*, secret: str, body: bytes, headers: Mapping[str, str]) -> Any:
    """What a receiver does (here for tests and the docs' example): the parsed payload, or
    ``WebhookVerificationError`` for a bad signature or a timestamp outside five minutes."""
    return Webhook(secret).verify(body, dict(headers))

"""A client of Circle's attestation service (Iris), v2 API: ``GET /v2/messages/{sourceDomain}
?transactionHash=0x...``.

What it answers, translated into the executor error taxonomy:

- 200: the messages the transaction emitted, each ``pending_confirmations`` or ``complete``
  (then with the message bytes and the attestation);
- 404: nothing known yet for that transaction (an empty list: Iris may simply not have seen
  the burn yet);
- 429 (Iris blocks a client that exceeds its rate for a while) and 5xx, timeouts, refused
  connections: :class:`TransientError`, with ``retry_after`` from the ``Retry-After`` header
  when there is one (a 429 without one waits :data:`RATE_LIMIT_BLOCK_SECONDS`, Circle's
  documented block), so the worker asks again no earlier;
- any other 4xx: the request itself is wrong and will stay wrong: :class:`DeterministicError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from movements.executors.base import DeterministicError, TransientError

# Circle: "exceeding the limit blocks all API requests for the next 5 minutes" (HTTP 429).
RATE_LIMIT_BLOCK_SECONDS = 300.0
COMPLETE = "complete"
PENDING = "pending_confirmations"
_HEX = re.compile(r"^0x(?:[0-9a-fA-F]{2})+$")


@dataclass(frozen=True)
class IrisMessage:
    """One message of a source transaction as Iris reports it."""

    status: str
    event_nonce: str
    message: bytes = b""  # set once complete
    attestation: bytes = b""  # set once complete
    raw: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return self.status == COMPLETE

    def as_detail(self) -> dict[str, Any]:
        """JSON-safe, for a node's result."""
        detail: dict[str, Any] = {"iris_status": self.status, "event_nonce": self.event_nonce}
        if self.complete:
            detail |= {
                "message": "0x" + self.message.hex(),
                "attestation": "0x" + self.attestation.hex(),
            }
        return detail


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """An HTTP ``Retry-After`` (delta-seconds or an HTTP date) in seconds; None if absent or
    unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _bytes(value: Any, what: str) -> bytes:
    if not isinstance(value, str) or not _HEX.match(value):
        raise TransientError(f"Iris answered a malformed {what}: {str(value)[:80]!r}")
    return bytes.fromhex(value[2:])


def parse_message(entry: Any) -> IrisMessage:
    if not isinstance(entry, dict):
        raise TransientError("Iris answered a malformed message entry")
    status = str(entry.get("status") or "")
    nonce = str(entry.get("eventNonce") or "")
    if status != COMPLETE:
        return IrisMessage(status or PENDING, nonce, raw=entry)
    return IrisMessage(
        status,
        nonce,
        _bytes(entry.get("message"), "message"),
        _bytes(entry.get("attestation"), "attestation"),
        raw=entry,
    )


class IrisClient:
    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers={"Accept": "application/json"},
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> IrisClient:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def messages(self, source_domain: int, tx_hash: str) -> list[IrisMessage]:
        """The messages ``tx_hash`` emitted on ``source_domain`` (empty while Iris knows none)."""
        path = f"/v2/messages/{int(source_domain)}"
        evidence = {"iris": self.base_url + path, "transaction_hash": tx_hash}
        try:
            response = self._client.get(path, params={"transactionHash": tx_hash})
        except httpx.HTTPError as exc:
            raise TransientError(
                f"Iris unreachable: {type(exc).__name__}: {exc}", evidence=evidence
            ) from exc
        evidence["http_status"] = response.status_code
        if response.status_code == 404:
            return []
        retry_after = retry_after_seconds(response.headers.get("Retry-After"))
        if response.status_code == 429:
            raise TransientError(
                "Iris rate limit (429)",
                evidence=evidence,
                retry_after=RATE_LIMIT_BLOCK_SECONDS if retry_after is None else retry_after,
            )
        if response.status_code >= 500:
            raise TransientError(
                f"Iris answered {response.status_code}",
                evidence={**evidence, "body": response.text[:300]},
                retry_after=retry_after,
            )
        if response.status_code != 200:
            raise DeterministicError(
                f"Iris refused the request ({response.status_code}): {response.text[:300]}",
                evidence=evidence,
            )
        try:
            body = response.json()
        except ValueError as exc:
            raise TransientError("Iris answered something that is not JSON") from exc
        entries = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(entries, list):
            raise TransientError("Iris answered without a messages list", evidence=evidence)
        return [parse_message(entry) for entry in entries]

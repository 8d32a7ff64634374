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

CCTP V2 adds ``GET /v2/burn/USDC/fees/{src}/{dst}`` (the minimum fee per finality threshold, in
basis points of the amount) and ``POST /v2/reattest/{nonce}``.

Every worker process shares one request budget per Iris service (``shared_bucket``): Circle
allows 35 requests a second (``QTG_IRIS_REQUESTS_PER_SECOND``) and blocks a caller that exceeds
it for 5 minutes, so each request
first takes a token of a bucket kept in the database (the exchange's ``CexRateBucket`` pattern,
keyed ``iris:<url>``), and a 429 blocks the bucket, for every worker, for the block period.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from movements.executors.base import DeterministicError, TransientError

# Circle: "exceeding the limit blocks all API requests for the next 5 minutes" (HTTP 429).
RATE_LIMIT_BLOCK_SECONDS = 300.0
# A token bucket lets through at most burst + rate requests in any one second: 3/7 of Circle's
# limit each keeps 6/7 of it, a margin (35 requests a second: 15 + 15 = 30).
IRIS_BUDGET_SHARE = 3 / 7
# A wait for a token shorter than this is slept through; longer is a TransientError.
MAX_IN_PROCESS_WAIT = 2.0
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


def iris_budget():
    """The bucket every worker shares: ``QTG_IRIS_REQUESTS_PER_SECOND`` (Circle's 35) less a
    margin."""
    from django.conf import settings

    from venues.cex import ratelimit

    share = settings.QTG_IRIS_REQUESTS_PER_SECOND * IRIS_BUDGET_SHARE
    return ratelimit.Budget(share, share)


class IrisClient:
    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        shared_bucket: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.shared_bucket = shared_bucket
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

    # --- the shared budget ------------------------------------------------------------------

    @property
    def bucket_key(self) -> str:
        return ("iris:" + self.base_url)[:64]

    def _take(self, evidence: dict[str, Any]) -> None:
        """One token of the budget every worker shares (a no-op without ``shared_bucket``)."""
        if not self.shared_bucket:
            return
        from venues.cex import ratelimit

        budget = iris_budget()
        while (wait := ratelimit.take(self.bucket_key, budget)) > 0:
            if wait > MAX_IN_PROCESS_WAIT:
                raise TransientError(
                    "Iris budget exhausted or blocked: not asking",
                    evidence={**evidence, "bucket": self.bucket_key, "wait_seconds": wait},
                    retry_after=wait,
                )
            time.sleep(wait)

    def _blocked(self, seconds: float) -> None:
        if not self.shared_bucket:
            return
        from venues.cex import ratelimit

        ratelimit.block(self.bucket_key, iris_budget(), seconds=seconds, reason="Iris answered 429")

    def _send(self, method: str, path: str, evidence: dict[str, Any], **kwargs: Any):
        self._take(evidence)
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise TransientError(
                f"Iris unreachable: {type(exc).__name__}: {exc}", evidence=evidence
            ) from exc
        evidence["http_status"] = response.status_code
        if response.status_code == 429:
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            seconds = RATE_LIMIT_BLOCK_SECONDS if retry_after is None else retry_after
            self._blocked(seconds)
            raise TransientError("Iris rate limit (429)", evidence=evidence, retry_after=seconds)
        return response

    # --- V2 endpoints ------------------------------------------------------------------------

    def _answered(
        self, method: str, path: str, evidence: dict[str, Any], *, refused: str
    ) -> httpx.Response:
        """Iris's 200 to ``method path``: a 5xx is transient, any other answer refuses
        ``refused`` for good."""
        response = self._send(method, path, evidence)
        if response.status_code >= 500:
            raise TransientError(f"Iris answered {response.status_code}", evidence=evidence)
        if response.status_code != 200:
            raise DeterministicError(
                f"Iris refused {refused} ({response.status_code}): {response.text[:300]}",
                evidence=evidence,
            )
        return response

    def fee_bps(self, source_domain: int, destination_domain: int) -> dict[int, Decimal]:
        """``GET /v2/burn/USDC/fees/{src}/{dst}``: the minimum fee (basis points of the amount)
        per finality threshold."""
        path = f"/v2/burn/USDC/fees/{int(source_domain)}/{int(destination_domain)}"
        evidence: dict[str, Any] = {"iris": self.base_url + path}
        response = self._answered("GET", path, evidence, refused="the fee query")
        try:
            body = response.json()
            return {
                int(entry["finalityThreshold"]): Decimal(str(entry["minimumFee"])) for entry in body
            }
        except (ValueError, KeyError, TypeError) as exc:
            raise TransientError("Iris answered a malformed fee schedule") from exc

    def reattest(self, nonce: str) -> dict[str, Any]:
        """``POST /v2/reattest/{nonce}``: ask Circle to re-sign a message (a fast message as
        finalized, or an expired one with a new expiration)."""
        path = f"/v2/reattest/{nonce}"
        evidence: dict[str, Any] = {"iris": self.base_url + path}
        return self._answered("POST", path, evidence, refused="the re-attestation").json()

    def messages(self, source_domain: int, tx_hash: str) -> list[IrisMessage]:
        """The messages ``tx_hash`` emitted on ``source_domain`` (empty while Iris knows none)."""
        path = f"/v2/messages/{int(source_domain)}"
        evidence = {"iris": self.base_url + path, "transaction_hash": tx_hash}
        response = self._send("GET", path, evidence, params={"transactionHash": tx_hash})
        if response.status_code == 404:
            return []
        retry_after = retry_after_seconds(response.headers.get("Retry-After"))
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


def fee_units(units: int, bps: Decimal) -> int:
    """The fee on ``units`` at ``bps`` basis points, rounded up to a whole unit (as Circle
    charges it: the attester never charges less than the schedule)."""
    return math.ceil(Decimal(units) * bps / Decimal(10_000))

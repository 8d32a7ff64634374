"""CCTP V2 in the Iris stand-in: attesting V2 messages, the fee schedule, the rate limit.

Used by :mod:`standins.iris` (which serves the HTTP API); nothing here parses with QTG's code.

What Circle's attester does to a V2 message before it signs (and what this one does):

- assigns the nonce (bytes32; here keccak256 of the source domain, transaction hash and log
  index, so the same burn always gets the same nonce, also after a reorg re-includes it);
- writes ``finalityThresholdExecuted``: 1000 (confirmed) for a fast message
  (``minFinalityThreshold`` <= 1000) whose fee fits its ``maxFee``, once the source chain's
  ``safe`` block has reached the burn; otherwise 2000 once its ``finalized`` block has;
- writes the body's ``feeExecuted``: the fee for the threshold executed, rounded up to a whole
  unit, from the schedule served at ``GET /v2/burn/USDC/fees`` (basis points of the amount:
  ``minimumFee`` 1 = 0.01 %); a message whose standard fee exceeds its ``maxFee`` stays
  ``pending_confirmations`` with ``delayReason`` ``insufficient_fee``;
- writes ``expirationBlock`` (0, or the destination chain's head + ``expiration_blocks`` when
  configured); ``POST /v2/reattest/{nonce}`` re-signs the message with a fresh expiration and,
  once the source has finalized the burn, ``finalityThresholdExecuted`` 2000 (the fee already
  charged stays).
"""

from __future__ import annotations

import math
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from eth_utils import keccak

from standins.cctp import bytes32_to_address, sign_attestation
from standins.cctp_v2 import (
    FINALITY_THRESHOLD_CONFIRMED,
    FINALITY_THRESHOLD_FINALIZED,
    BurnMessageV2,
    MessageV2,
)

CCTP_VERSION_V2 = 2
REATTEST_ACCEPTED = "Re-attestation successfully requested for nonce."


@dataclass(frozen=True)
class FeeSchedule:
    """Fees in basis points of the amount, per finality threshold (Circle's ``minimumFee``)."""

    fast_bps: Decimal = Decimal("1")
    standard_bps: Decimal = Decimal("0")

    def minimum_fees(self) -> list[dict[str, Any]]:
        """The body of ``GET /v2/burn/USDC/fees/{src}/{dst}``."""
        return [
            {
                "finalityThreshold": FINALITY_THRESHOLD_CONFIRMED,
                "minimumFee": _number(self.fast_bps),
            },
            {
                "finalityThreshold": FINALITY_THRESHOLD_FINALIZED,
                "minimumFee": _number(self.standard_bps),
            },
        ]

    def fee(self, amount: int, *, fast: bool) -> int:
        """The fee charged on `amount` (smallest units), rounded up to a whole unit."""
        bps = self.fast_bps if fast else self.standard_bps
        return math.ceil(Decimal(amount) * bps / Decimal(10_000))


def _number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


@dataclass(frozen=True)
class RateLimit:
    """Circle's attestation API limit: more than ``requests`` in ``per_seconds`` from one caller
    answers 429, and the caller is then blocked (429 to everything) for ``block_seconds``."""

    requests: int = 35
    per_seconds: float = 1.0
    block_seconds: float = 300.0


@dataclass
class RateLimiter:
    limit: RateLimit
    _seen: dict[str, deque[float]] = field(default_factory=dict)
    _blocked_until: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, caller: str, now: float | None = None) -> float | None:
        """None if the request may be served, else the seconds until the caller's block ends."""
        now = time.monotonic() if now is None else now
        with self._lock:
            until = self._blocked_until.get(caller)
            if until is not None and now < until:
                return until - now
            seen = self._seen.setdefault(caller, deque())
            while seen and seen[0] <= now - self.limit.per_seconds:
                seen.popleft()
            if len(seen) >= self.limit.requests:
                seen.clear()
                self._blocked_until[caller] = now + self.limit.block_seconds
                return self.limit.block_seconds
            seen.append(now)
            return None

    def reset(self) -> None:
        with self._lock:
            self._seen.clear()
            self._blocked_until.clear()


def assign_nonce(source_domain: int, tx_hash: str, log_index: int) -> bytes:
    return keccak(
        b"qtg iris v2 nonce"
        + struct.pack(">I", source_domain)
        + bytes.fromhex(tx_hash[2:].lower())
        + struct.pack(">I", log_index)
    )


@dataclass
class AttestedV2:
    """One V2 message the stand-in has signed (it remembers it, as Circle does)."""

    source_domain: int
    tx_hash: str
    log_index: int
    emitted: bytes  # as the burn emitted it
    message: bytes  # as signed
    reattest_requested: bool = False


@dataclass(frozen=True)
class Decision:
    """What the attester makes of an emitted message now: sign it (with these fields) or wait."""

    executed: int | None  # finalityThresholdExecuted, or None: not yet
    fee: int = 0
    delay_reason: str | None = None


def decide(
    message: MessageV2,
    *,
    source_block: int,
    safe_block: int,
    finalized_block: int,
    fees: FeeSchedule,
) -> Decision:
    burn = _burn_or_none(message)
    fast = message.min_finality_threshold <= FINALITY_THRESHOLD_CONFIRMED
    if burn is None:  # a plain message: no fee
        if fast and source_block <= safe_block:
            return Decision(FINALITY_THRESHOLD_CONFIRMED)
        if source_block <= finalized_block:
            return Decision(FINALITY_THRESHOLD_FINALIZED)
        return Decision(None)
    fast_fee = fees.fee(burn.amount, fast=True)
    if fast and fast_fee <= burn.max_fee:
        if source_block <= safe_block:
            return Decision(FINALITY_THRESHOLD_CONFIRMED, fast_fee)
        return Decision(None)
    standard_fee = fees.fee(burn.amount, fast=False)
    if standard_fee > burn.max_fee:
        return Decision(None, delay_reason="insufficient_fee")
    if source_block <= finalized_block:
        return Decision(FINALITY_THRESHOLD_FINALIZED, standard_fee)
    return Decision(None, delay_reason="insufficient_fee" if fast else None)


def _burn_or_none(message: MessageV2) -> BurnMessageV2 | None:
    try:
        return message.burn
    except ValueError:
        return None


def complete(
    emitted: MessageV2,
    *,
    nonce: bytes,
    executed: int,
    fee: int | None,
    expiration_block: int,
) -> bytes:
    """The emitted message with the attester's fields filled in (`fee` None: keep the body's)."""
    burn = _burn_or_none(emitted)
    body = emitted.body
    if burn is not None:
        body = BurnMessageV2(
            **{
                **burn.__dict__,
                "fee_executed": burn.fee_executed if fee is None else fee,
                "expiration_block": expiration_block,
            }
        ).encode()
    return emitted.with_(nonce=nonce, finality_threshold_executed=executed, body=body).encode()


def pending_entry(delay_reason: str | None) -> dict[str, Any]:
    return {
        "message": "0x",
        "eventNonce": None,
        "attestation": "PENDING",
        "decodedMessage": None,
        "cctpVersion": CCTP_VERSION_V2,
        "status": "pending_confirmations",
        "delayReason": delay_reason,
    }


def complete_entry(raw: bytes, key: str | bytes) -> dict[str, Any]:
    """A ``complete`` entry of ``GET /v2/messages`` for a signed V2 message."""
    message = MessageV2.parse(raw)
    burn = _burn_or_none(message)
    decoded_body = None
    if burn is not None:
        decoded_body = {
            "burnToken": bytes32_to_address(burn.burn_token),
            "mintRecipient": bytes32_to_address(burn.mint_recipient),
            "amount": str(burn.amount),
            "messageSender": bytes32_to_address(burn.message_sender),
            "maxFee": str(burn.max_fee),
            "feeExecuted": str(burn.fee_executed),
            "expirationBlock": str(burn.expiration_block),
            "hookData": "0x" + burn.hook_data.hex() if burn.hook_data else None,
        }
    return {
        "message": "0x" + raw.hex(),
        "eventNonce": "0x" + message.nonce.hex(),
        "attestation": "0x" + sign_attestation(raw, key).hex(),
        "decodedMessage": {
            "sourceDomain": str(message.source_domain),
            "destinationDomain": str(message.destination_domain),
            "nonce": "0x" + message.nonce.hex(),
            "sender": "0x" + message.sender.hex(),
            "recipient": "0x" + message.recipient.hex(),
            "destinationCaller": "0x" + message.destination_caller.hex(),
            "minFinalityThreshold": str(message.min_finality_threshold),
            "finalityThresholdExecuted": str(message.finality_threshold_executed),
            "messageBody": "0x" + message.body.hex(),
            "decodedMessageBody": decoded_body,
        },
        "cctpVersion": CCTP_VERSION_V2,
        "status": "complete",
        "delayReason": None,
    }

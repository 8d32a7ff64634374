"""ccxt's exceptions onto the executor error taxonomy (``movements.executors.base``).

Before a withdrawal is sent (prepare, reads while observing or recovering) nothing can have
moved: anything the exchange may answer differently later is a ``TransientError``. While a
withdrawal is sent, an error that does not prove the exchange refused it is an
``AmbiguousError``: the node goes UNKNOWN and recovery asks the exchange. What the exchange
will keep refusing (insufficient balance, permission, an address it does not accept, a bad
signature) is a ``DeterministicError`` in every phase: nothing was withdrawn.

Messages are scrubbed of the account's key and secret before they become evidence.
"""

from typing import Any

import ccxt

from movements.executors.base import (
    AmbiguousError,
    DeterministicError,
    ExecutorError,
    TransientError,
)
from venues.cex.client import DEFAULT_BACKOFF_SECONDS, Throttled

# Upbit's error names that ccxt leaves as a plain ExchangeError (the name is in the message).
UPBIT_REFUSALS = (
    "withdraw_address",
    "validation_error",
    "invalid_query_payload",
    "jwt_verification",
    "invalid_access_key",
    "insufficient_funds",
    "out_of_scope",
)
# How long to hold off an exchange in maintenance that said nothing about when it ends.
MAINTENANCE_BACKOFF_SECONDS = 5.0

REFUSED = (
    ccxt.InsufficientFunds,
    ccxt.AuthenticationError,  # PermissionDenied (not whitelisted), AccountSuspended, bad keys
    ccxt.BadRequest,
    ccxt.BadSymbol,
    ccxt.InvalidAddress,
    ccxt.NotSupported,
    ccxt.ArgumentsRequired,
)


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, "<redacted>")
    return text


def refused_by_exchange(exc: BaseException) -> bool:
    """The exchange refused the request itself, for good."""
    if isinstance(exc, REFUSED):
        return True
    return isinstance(exc, ccxt.ExchangeError) and any(n in str(exc) for n in UPBIT_REFUSALS)


def told_to_wait(exc: BaseException) -> float | None:
    """Seconds the exchange (or our shared budget) said to wait, when that is what it said."""
    if isinstance(exc, Throttled):
        return exc.retry_after
    if isinstance(exc, ccxt.DDoSProtection):  # RateLimitExceeded is one
        return float(getattr(exc, "qtg_retry_after", DEFAULT_BACKOFF_SECONDS))
    return None


def stamp_refused(exc: BaseException) -> bool:
    """The exchange refused the request's timestamp (Binance -1021, outside the recvWindow or
    ahead of its clock) before acting on it: nothing was withdrawn."""
    return isinstance(exc, ccxt.InvalidNonce)


def translate(exc: BaseException, *, phase: str, secrets: tuple[str, ...]) -> ExecutorError:
    """The taxonomy's error for ``exc`` raised by ccxt at ``phase`` (``submit`` or not)."""
    if isinstance(exc, ExecutorError):
        return exc
    message = scrub(f"{type(exc).__name__}: {exc}", secrets)[:600]
    evidence: dict[str, Any] = {"ccxt_error": type(exc).__name__, "message": message}
    if refused_by_exchange(exc):
        return DeterministicError(f"the exchange refused: {message}", evidence=evidence)
    wait = told_to_wait(exc)
    if wait is not None:
        evidence["retry_after"] = wait
        if phase == "submit":
            return TransientError(
                f"told to wait {wait:.0f}s while withdrawing: {message}",
                evidence=evidence,
                retry_after=wait,
            )
        return TransientError(f"told to wait: {message}", evidence=evidence, retry_after=wait)
    if isinstance(exc, ccxt.ExchangeNotAvailable):  # OnMaintenance is one
        if phase == "submit":
            return AmbiguousError(
                f"exchange unavailable while withdrawing: {message}", evidence=evidence
            )
        return TransientError(
            f"exchange unavailable: {message}",
            evidence=evidence,
            retry_after=MAINTENANCE_BACKOFF_SECONDS,
        )
    if phase == "submit":
        # A timeout, a dropped connection, an unexpected answer: it may have been accepted.
        return AmbiguousError(f"no clear answer to the withdrawal: {message}", evidence=evidence)
    return TransientError(message, evidence=evidence)

"""Bithumb, API 2.0 (https://apidocs.bithumb.com): the REST shape Upbit has (``/v1/...``), JWT
HS256 with ``access_key``, ``nonce``, ``timestamp`` (ms) and ``query_hash`` (SHA-512 of the
URL-encoded query) with ``query_hash_alg``. The timestamp is signed, but Bithumb documents no
window it enforces on it: like Upbit's, a sent request has no bound QTG may rely on. No client
withdrawal id; deposit records without an address; the fee is charged on top. Withdrawals to
another exchange carry the travel-rule fields (``exchange_name``, ``receiver_type``,
``receiver_ko_name``, ``receiver_en_name``): an account gives them as ``withdraw_params``."""

from typing import Any

import ccxt

from venues.cex.exchanges.upbit import KoreanExchange

# ccxt reads Bithumb's API 2.0 errors by their message only: its names, mapped, make a refusal
# a refusal (nothing withdrawn) rather than an unclear answer.
ERROR_NAMES = {
    "withdraw_address": ccxt.InvalidAddress,
    "insufficient_funds_withdraw": ccxt.InsufficientFunds,
    "validation_error": ccxt.BadRequest,
    "jwt_verification": ccxt.AuthenticationError,
    "invalid_jwt": ccxt.AuthenticationError,
    "invalid_access_key": ccxt.AuthenticationError,
    "invalid_query_payload": ccxt.AuthenticationError,
    "out_of_scope": ccxt.PermissionDenied,
    "withdraw_not_found": ccxt.OrderNotFound,
    "deposit_not_found": ccxt.OrderNotFound,
}


class Bithumb(KoreanExchange):
    kind = "bithumb"
    path_prefix = "V1"

    def client_options(self, *, moved: bool) -> dict[str, Any]:
        return {"exceptions": {**ccxt.bithumb().describe()["exceptions"], **ERROR_NAMES}}

    # Withdrawals: processing, done, cancelled (ccxt and the API answer them in either case);
    # deposits: DEPOSIT_PROCESSING, DEPOSIT_ACCEPTED, DEPOSIT_CANCELLED.
    withdrawal_statuses = {
        "DONE": "completed",
        "FAILED": "failed",
        "REJECTED": "failed",
        "CANCELLED": "failed",
        "CANCELED": "failed",
    }
    deposit_statuses = {
        "DEPOSIT_ACCEPTED": "completed",
        "ACCEPTED": "completed",
        "DEPOSIT_CANCELLED": "failed",
        "CANCELLED": "failed",
        "DEPOSIT_REJECTED": "failed",
        "REJECTED": "failed",
    }

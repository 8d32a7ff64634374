"""Bithumb's REST surface, API 2.0 (https://api.bithumb.com/v1), the part ccxt 4.5 calls with
``generation: 2`` for markets, balances, withdrawals and deposits: the Upbit shape (the two
share it), with Bithumb's own signature and vocabulary.

Private requests carry `Authorization: Bearer <JWT>` signed HS256 (only) with the secret key. The
payload holds `access_key`, a fresh `nonce`, `timestamp` (ms) and, when the request has
parameters, `query_hash` = hex(SHA-512(query string)) with `query_hash_alg` = SHA512, where
the query string is URL-encoded: the URL's query as sent (GET), or the JSON body's fields in
order (POST). Bithumb documents no window it enforces on the timestamp: neither does this.
Withdrawals to another exchange carry the travel-rule fields (`exchange_name`,
`receiver_type`, and the receiver's names); withdrawal states are lower case (`processing`,
`done`, `cancelled`), deposit states `DEPOSIT_PROCESSING` / `DEPOSIT_ACCEPTED`.
"""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode

from .ledger import (
    CANCELED,
    COMPLETED,
    FAILED,
    FEE_ON_TOP,
    PENDING,
    PROCESSING,
    REJECTED,
    Account,
    Books,
    Coin,
    Refusal,
)
from .upbit import ERRORS as UPBIT_ERRORS
from .upbit import UpbitVenue, _b64url_decode, _raw_value
from .wire import Request, Response, Route, json_response

WITHDRAWAL_STATES = {
    PENDING: "processing",
    PROCESSING: "processing",
    COMPLETED: "done",
    FAILED: "failed",
    REJECTED: "rejected",
    CANCELED: "cancelled",
}
DEPOSIT_STATES = {PENDING: "DEPOSIT_PROCESSING", COMPLETED: "DEPOSIT_ACCEPTED"}
# Travel-rule fields Bithumb asks of a withdrawal to another exchange.
TRAVEL_RULE = ("exchange_name", "receiver_type")

ERRORS = {
    **UPBIT_ERRORS,
    "timestamp_missing": (401, "invalid_jwt", "JWT 토큰의 timestamp가 없습니다."),
    "travel_rule": (400, "validation_error", "{param} does not have a valid value"),
}


class BithumbVenue(UpbitVenue):
    name = "bithumb"
    withdrawal_states = WITHDRAWAL_STATES
    deposit_states = DEPOSIT_STATES

    def _query_string(self, request: Request) -> str:
        """The URL-encoded query string the client had to hash."""
        if request.method == "POST":
            fields = [(k, _raw_value(v)) for k, v in self._body_fields(request)]
            return urlencode(fields, quote_via=quote)
        return request.raw_query

    def authenticate(self, request: Request) -> Account:
        payload = self._unverified_payload(request) or {}
        if "timestamp" not in payload:
            raise Refusal("timestamp_missing")
        # Bithumb signs HS256 only (Upbit takes HS512 as well).
        if self._unverified_header(request).get("alg") != "HS256":
            raise Refusal("bad_signature")
        return super().authenticate(request)

    def _unverified_header(self, request: Request) -> dict:
        token = self._token(request)
        if not token or token.count(".") != 2:
            return {}
        try:
            header = json.loads(_b64url_decode(token.split(".")[0]))
        except ValueError:
            return {}
        return header if isinstance(header, dict) else {}

    def refuse(self, refusal: Refusal) -> Response:
        status, name, message = ERRORS[refusal.reason]
        return json_response(
            status, {"error": {"name": name, "message": message.format(**refusal.details)}}
        )

    def withdraw(self, params: dict, account: Account) -> Response:
        """POST /v1/withdraws/coin (with the travel-rule fields)."""
        for name in TRAVEL_RULE:
            if not params.get(name):
                raise Refusal("travel_rule", param=name)
        return super().withdraw(params, account)

    routes = {
        **UpbitVenue.routes,
        ("POST", "/v1/withdraws/coin"): Route("withdraw", withdraw, signed=True),
    }


def make_books(coins: dict[str, Coin], accounts: list[Account]) -> Books:
    """Bithumb charges the withdrawal fee on top of the amount asked for."""
    return Books("bithumb", coins=coins, accounts=accounts, fee_mode=FEE_ON_TOP, dashed_ids=True)

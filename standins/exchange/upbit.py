"""Upbit's REST surface (https://api.upbit.com/v1), the part ccxt 4.5 calls for markets,
balances, withdrawals and deposits.

Private requests carry `Authorization: Bearer <JWT>`, signed HS256 (or HS512) with the secret
key. The payload holds `access_key`, a fresh `nonce` and, when the request has parameters,
`query_hash` = hex(SHA-512(query string)) with `query_hash_alg` = SHA512. The query string is
the unencoded `key=value&...` form of the URL query (GET) or of the JSON body's fields in order
(POST), which is what ccxt hashes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qsl, unquote_plus

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
    Deposit,
    Refusal,
    Throttle,
    Withdrawal,
    plain,
    to_decimal,
)
from .wire import Request, Response, Route, Venue, json_response, text_response

KST = timezone(timedelta(hours=9))

# https://docs.upbit.com/kr/reference/get-withdrawal (state)
WITHDRAWAL_STATES = {
    PENDING: "WAITING",
    PROCESSING: "PROCESSING",
    COMPLETED: "DONE",
    FAILED: "FAILED",
    REJECTED: "REJECTED",
    CANCELED: "CANCELLED",
}
# https://docs.upbit.com/kr/reference/get-deposit (state)
DEPOSIT_STATES = {PENDING: "PROCESSING", COMPLETED: "ACCEPTED"}

JWT_ALGORITHMS = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}

# Refusal reason -> (HTTP status, error name, message), answered as
# {"error": {"name": ..., "message": ...}}. Names from Upbit's error guide
# (https://docs.upbit.com/kr/reference/rest-api-guide); the messages are the Korean ones.
# `insufficient_funds_withdraw` is NOT documented by Upbit (only the order variants
# insufficient_funds_ask/_bid are): it is this stand-in's choice, matched by ccxt's broad
# `insufficient_funds` rule.
ERRORS = {
    "auth_missing": (401, "jwt_verification", "Jwt 토큰 검증에 실패했습니다."),
    "api_key_invalid": (401, "invalid_access_key", "잘못된 엑세스 키입니다."),
    "bad_signature": (401, "jwt_verification", "Jwt 토큰 검증에 실패했습니다."),
    "nonce_used": (401, "nonce_used", "이미 요청한 nonce값이 다시 사용되었습니다."),
    "bad_query_hash": (401, "invalid_query_payload", "Jwt의 query를 검증하는데 실패하였습니다."),
    "param_missing": (
        400,
        "validation_error",
        "Missing request parameter error. Check the required parameters!",
    ),
    "malformed": (400, "validation_error", "{param} does not have a valid value"),
    "unknown_coin": (400, "validation_error", "currency does not have a valid value"),
    "unknown_network": (400, "validation_error", "net_type does not have a valid value"),
    "invalid_address": (400, "withdraw_address", "허용되지 않은 출금 주소입니다."),
    "address_not_whitelisted": (400, "withdraw_address", "허용되지 않은 출금 주소입니다."),
    "below_minimum": (400, "validation_error", "최소 출금 수량은 {minimum} 입니다."),
    "amount_not_above_fee": (400, "validation_error", "출금 수수료보다 큰 수량을 입력하세요."),
    "insufficient_balance": (400, "insufficient_funds_withdraw", "출금 가능 잔고가 부족합니다."),
    "unknown_withdrawal": (404, "withdraw_not_found", "출금 정보를 찾지 못했습니다."),
    "unknown_deposit": (404, "deposit_not_found", "입금 정보를 찾지 못했습니다."),
}


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _kst(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(KST).replace(microsecond=0).isoformat()


def _raw_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class UpbitVenue(Venue):
    name = "upbit"
    withdrawal_states = WITHDRAWAL_STATES
    deposit_states = DEPOSIT_STATES

    def client_key(self, request: Request) -> str:
        payload = self._unverified_payload(request)
        return (payload or {}).get("access_key") or request.client

    def params(self, request: Request) -> dict:
        if request.method == "POST":
            return {k: _raw_value(v) for k, v in self._body_fields(request)}
        params: dict = {}
        for key, value in parse_qsl(request.raw_query, keep_blank_values=True):
            if key.endswith("[]"):
                params.setdefault(key, []).append(value)
            else:
                params[key] = value
        return params

    def _body_fields(self, request: Request) -> list[tuple[str, object]]:
        if not request.body:
            return []
        try:
            # Numbers are kept as the exact text sent: the query hash covers that text.
            fields = json.loads(
                request.body, object_pairs_hook=list, parse_float=str, parse_int=str
            )
        except ValueError:
            raise Refusal("malformed", param="body") from None
        if not isinstance(fields, list):
            raise Refusal("malformed", param="body")
        return fields

    def _query_string(self, request: Request) -> str:
        """The unencoded query string the client had to hash."""
        if request.method == "POST":
            return "&".join(f"{k}={_raw_value(v)}" for k, v in self._body_fields(request))
        parts = []
        for part in request.raw_query.split("&") if request.raw_query else []:
            key, _, value = part.partition("=")
            parts.append(f"{unquote_plus(key)}={unquote_plus(value)}")
        return "&".join(parts)

    @staticmethod
    def _token(request: Request) -> str | None:
        header = request.headers.get("Authorization") or ""
        if not header.startswith("Bearer "):
            return None
        return header[len("Bearer ") :].strip()

    def _unverified_payload(self, request: Request) -> dict | None:
        token = self._token(request)
        if not token or token.count(".") != 2:
            return None
        try:
            payload = json.loads(_b64url_decode(token.split(".")[1]))
        except ValueError:
            return None
        return payload if isinstance(payload, dict) else None

    def authenticate(self, request: Request) -> Account:
        token = self._token(request)
        if not token or token.count(".") != 2:
            raise Refusal("auth_missing")
        header_part, payload_part, signature_part = token.split(".")
        try:
            header = json.loads(_b64url_decode(header_part))
            payload = json.loads(_b64url_decode(payload_part))
            signature = _b64url_decode(signature_part)
        except ValueError:
            raise Refusal("bad_signature") from None
        digest = JWT_ALGORITHMS.get(header.get("alg"))
        if digest is None or not isinstance(payload, dict):
            raise Refusal("bad_signature")
        account = self.books.account_by_key(payload.get("access_key"))
        if account is None:
            raise Refusal("api_key_invalid")
        expected = hmac.new(
            account.secret.encode(), f"{header_part}.{payload_part}".encode(), digest
        ).digest()
        if not hmac.compare_digest(expected, signature):
            raise Refusal("bad_signature")
        nonce = payload.get("nonce")
        if not nonce or self.books.nonce_seen(f"{account.api_key}:{nonce}"):
            raise Refusal("nonce_used")
        query = self._query_string(request)
        if query or "query_hash" in payload:
            if payload.get("query_hash_alg", "SHA512") != "SHA512":
                raise Refusal("bad_query_hash")
            wanted = hashlib.sha512(query.encode()).hexdigest()
            if not hmac.compare_digest(wanted, str(payload.get("query_hash", "")).lower()):
                raise Refusal("bad_query_hash")
        return account

    def refuse(self, refusal: Refusal) -> Response:
        status, name, message = ERRORS[refusal.reason]
        return json_response(
            status, {"error": {"name": name, "message": message.format(**refusal.details)}}
        )

    def throttled(self, throttle: Throttle) -> Response:
        # Upbit reports the remaining budget, not a Retry-After (it documents none); the body
        # is plain text, so ccxt maps these by HTTP status: 429 RateLimitExceeded,
        # 418 DDoSProtection.
        headers = {"Remaining-Req": "group=default; min=0; sec=0"}
        if throttle.status == 418:
            return text_response(
                418, f"Too many API requests. Blocked for {throttle.retry_after} seconds.", headers
            )
        return text_response(429, "Too many API requests.", headers)

    def maintenance(self) -> Response:
        return text_response(503, "Service Unavailable: system maintenance")

    # --- public ----------------------------------------------------------------------------

    def markets(self, params: dict, account: None) -> Response:
        """GET /v1/market/all: one KRW market per coin."""
        rows = [
            {"market": f"KRW-{coin.code}", "korean_name": coin.name, "english_name": coin.name}
            for coin in self.books.coins.values()
        ]
        if params.get("is_details") == "true":
            for row in rows:
                row["market_warning"] = "NONE"
        return json_response(200, rows)

    # --- private ---------------------------------------------------------------------------

    def accounts(self, params: dict, account: Account) -> Response:
        """GET /v1/accounts."""
        with self.books.lock:
            balances = dict(account.balances)
        rows = [
            {
                "currency": code,
                "balance": plain(amount),
                "locked": "0",
                "avg_buy_price": "0",
                "avg_buy_price_modified": False,
                "unit_currency": "KRW",
            }
            for code, amount in sorted(balances.items())
        ]
        return json_response(200, rows)

    def withdraw(self, params: dict, account: Account) -> Response:
        """POST /v1/withdraws/coin."""
        for name in ("currency", "net_type", "amount", "address"):
            if not params.get(name):
                raise Refusal("param_missing", param=name)
        withdrawal = self.books.withdraw(
            account,
            coin=params["currency"],
            network=params["net_type"],
            address=params["address"],
            tag=params.get("secondary_address") or None,
            amount=to_decimal(params["amount"]),
            client_id=None,  # Upbit takes no client withdrawal id
        )
        return self.accepted(withdrawal, 201, self._withdrawal_row)

    def withdraw_chance(self, params: dict, account: Account) -> Response:
        """GET /v1/withdraws/chance: the currency's withdrawal fee, minimum and precision
        (``withdraw_limit.fixed``: decimal places)."""
        for name in ("currency", "net_type"):
            if not params.get(name):
                raise Refusal("param_missing", param=name)
        coin = self.books.coin(params["currency"])
        network = coin.network(params["net_type"])
        with self.books.lock:
            balance = account.balances.get(coin.code, 0)
        return json_response(
            200,
            {
                "member_level": {"security_level": 3, "fee_level": 0, "email_verified": True},
                "currency": {
                    "code": coin.code,
                    "withdraw_fee": plain(network.withdraw_fee),
                    "is_coin": True,
                    "wallet_state": "working",
                    "wallet_support": ["deposit", "withdraw"],
                },
                "account": {"currency": coin.code, "balance": plain(balance), "locked": "0"},
                "withdraw_limit": {
                    "currency": coin.code,
                    "minimum": plain(network.withdraw_min),
                    "onetime": None,
                    "daily": None,
                    "remaining_daily": None,
                    "remaining_daily_krw": None,
                    "fixed": network.decimals,
                    "can_withdraw": True,
                },
            },
        )

    def withdrawals(self, params: dict, account: Account) -> Response:
        """GET /v1/withdraws (newest first unless order_by=asc)."""
        rows = self.books.visible_withdrawals(account)
        rows = self._filter(rows, params, self.withdrawal_states)
        return json_response(200, [self._withdrawal_row(w) for w in rows])

    def withdrawal(self, params: dict, account: Account) -> Response:
        """GET /v1/withdraw by uuid or txid."""
        if not params.get("uuid") and not params.get("txid"):
            raise Refusal("param_missing", param="uuid")
        for w in self.books.visible_withdrawals(account):
            if w.id == params.get("uuid") or (params.get("txid") and w.txid == params["txid"]):
                return json_response(200, self._withdrawal_row(w))
        raise Refusal("unknown_withdrawal")

    def deposits(self, params: dict, account: Account) -> Response:
        """GET /v1/deposits (newest first unless order_by=asc)."""
        rows = self._filter(self.books.account_deposits(account), params, self.deposit_states)
        return json_response(200, [self._deposit_row(d) for d in rows])

    def deposit(self, params: dict, account: Account) -> Response:
        """GET /v1/deposit by uuid or txid."""
        if not params.get("uuid") and not params.get("txid"):
            raise Refusal("param_missing", param="uuid")
        for d in self.books.account_deposits(account):
            if d.id == params.get("uuid") or (params.get("txid") and d.txid == params["txid"]):
                return json_response(200, self._deposit_row(d))
        raise Refusal("unknown_deposit")

    def withdraw_addresses(self, params: dict, account: Account) -> Response:
        """GET /v1/withdraws/coin_addresses: the registered (allowed) withdrawal addresses."""
        with self.books.lock:
            allowed = sorted(account.whitelist or ())
        rows = []
        for coin in self.books.coins.values():
            for network in coin.networks.values():
                for address in allowed:
                    if re.fullmatch(network.address_regex, address):
                        rows.append(
                            {
                                "currency": coin.code,
                                "net_type": network.id,
                                "network_name": network.name,
                                "withdraw_address": address,
                                "secondary_address": None,
                            }
                        )
        return json_response(200, rows)

    def deposit_address(self, params: dict, account: Account) -> Response:
        """GET /v1/deposits/coin_address."""
        for name in ("currency", "net_type"):
            if not params.get(name):
                raise Refusal("param_missing", param=name)
        coin = self.books.coin(params["currency"])
        network = coin.network(params["net_type"])
        return json_response(
            200,
            {
                "currency": coin.code,
                "net_type": network.id,
                "deposit_address": account.deposit_address(self.name, coin.code, network),
                "secondary_address": None,
            },
        )

    # --- rows ------------------------------------------------------------------------------

    @staticmethod
    def _filter(rows: list, params: dict, states: dict[str, str]) -> list:
        if params.get("currency"):
            rows = [r for r in rows if r.coin == params["currency"]]
        if params.get("state"):
            rows = [r for r in rows if states[r.status].upper() == params["state"].upper()]
        if params.get("uuids[]"):
            rows = [r for r in rows if r.id in params["uuids[]"]]
        if params.get("txids[]"):
            rows = [r for r in rows if r.txid in params["txids[]"]]
        if params.get("order_by") == "asc":
            rows = list(reversed(rows))
        try:
            limit = min(int(params.get("limit") or 100), 100)
            page = max(int(params.get("page") or 1), 1)
        except ValueError:
            raise Refusal("malformed", param="limit") from None
        return rows[(page - 1) * limit : page * limit]

    def _withdrawal_row(self, w: Withdrawal) -> dict:
        return {
            "type": "withdraw",
            "uuid": w.id,
            "currency": w.coin,
            "net_type": w.network,
            "txid": w.txid,
            "state": self.withdrawal_states[w.status],
            "created_at": _kst(w.created_at),
            "done_at": _kst(w.completed_at),
            "amount": plain(w.sent),
            "fee": plain(w.fee),
            "transaction_type": "default",
            "is_cancelable": w.status == PENDING,
        }

    def _deposit_row(self, d: Deposit) -> dict:
        return {
            "type": "deposit",
            "uuid": d.id,
            "currency": d.coin,
            "net_type": d.network,
            "txid": d.txid,
            "state": self.deposit_states[d.status],
            "created_at": _kst(d.created_at),
            "done_at": _kst(d.completed_at),
            "amount": plain(d.amount),
            "fee": "0",
            "transaction_type": "default",
        }

    routes = {
        ("GET", "/v1/market/all"): Route("markets", markets, signed=False),
        ("GET", "/v1/accounts"): Route("balance", accounts, signed=True),
        ("POST", "/v1/withdraws/coin"): Route("withdraw", withdraw, signed=True),
        ("GET", "/v1/withdraws"): Route("withdrawals", withdrawals, signed=True),
        ("GET", "/v1/withdraws/chance"): Route("withdraw_chance", withdraw_chance, signed=True),
        ("GET", "/v1/withdraw"): Route("withdrawals", withdrawal, signed=True),
        ("GET", "/v1/deposits"): Route("deposits", deposits, signed=True),
        ("GET", "/v1/deposit"): Route("deposits", deposit, signed=True),
        ("GET", "/v1/withdraws/coin_addresses"): Route(
            "withdraw_addresses", withdraw_addresses, signed=True
        ),
        ("GET", "/v1/deposits/coin_address"): Route(
            "deposit_address", deposit_address, signed=True
        ),
    }


def make_books(coins: dict[str, Coin], accounts: list[Account]) -> Books:
    """Upbit charges the withdrawal fee on top of the amount asked for; ids are dashed UUIDs."""
    return Books("upbit", coins=coins, accounts=accounts, fee_mode=FEE_ON_TOP, dashed_ids=True)

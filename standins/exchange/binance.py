"""Binance's REST surface, the part ccxt 4.5 calls for markets, balances and the wallet.

Signed (USER_DATA) requests carry `X-MBX-APIKEY` and, in the query string or the
x-www-form-urlencoded body, `timestamp`, optional `recvWindow` and `signature` =
hex(HMAC-SHA256(secret, totalParams)), where totalParams is the query string (without the
signature) concatenated with the body (without the signature), exactly as sent.
"""

from __future__ import annotations

import hashlib
import hmac
import zlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from urllib.parse import parse_qsl

from .ledger import (
    CANCELED,
    COMPLETED,
    FAILED,
    FEE_DEDUCTED,
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
from .wire import Request, Response, Route, Venue, json_response

DEFAULT_RECV_WINDOW_MS = 5000
MAX_RECV_WINDOW_MS = 60000
# Binance rejects a timestamp more than this far ahead of its clock.
AHEAD_TOLERANCE_MS = 1000

# https://developers.binance.com/docs/wallet/capital/withdraw-history (status)
WITHDRAWAL_STATUS_CODES = {
    PENDING: 4,  # Processing: accepted, not yet broadcast
    PROCESSING: 4,
    COMPLETED: 6,
    FAILED: 5,
    REJECTED: 3,
    CANCELED: 1,
}
# https://developers.binance.com/docs/wallet/capital/deposite-history (status)
DEPOSIT_STATUS_CODES = {PENDING: 0, COMPLETED: 1}

# Refusal reason -> (HTTP status, Binance error code, message). The codes and messages are
# Binance's own (ccxt's binance.py quotes them in its exception tables).
ERRORS = {
    "api_key_missing": (401, -2014, "API-key format invalid."),
    "api_key_invalid": (401, -2015, "Invalid API-key, IP, or permissions for action."),
    "param_missing": (
        400,
        -1102,
        "Mandatory parameter '{param}' was not sent, was empty/null, or malformed.",
    ),
    "malformed": (400, -1100, "Illegal characters found in parameter '{param}'."),
    "bad_signature": (400, -1022, "Signature for this request is not valid."),
    "recv_window_too_large": (400, -1131, "recvWindow must be less than 60000"),
    "timestamp_outside_window": (
        400,
        -1021,
        "Timestamp for this request is outside of the recvWindow.",
    ),
    "timestamp_ahead": (
        400,
        -1021,
        "Timestamp for this request was 1000ms ahead of the server's time.",
    ),
    "unknown_coin": (400, -4018, "We don't have this asset."),
    "unknown_network": (400, -4019, "Current asset is not open for withdrawal."),
    "invalid_address": (400, -4033, "Illegal address."),
    "address_not_whitelisted": (
        400,
        -4035,
        "This address is not on the whitelist. Please join and try again.",
    ),
    "below_minimum": (400, -4022, "Not less than the minimum pick-up quantity {minimum}."),
    "amount_not_above_fee": (
        400,
        -4028,
        "The amount of withdrawal must be greater than the Commission.",
    ),
    "insufficient_balance": (400, -4026, "You have insufficient balance."),
}

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # applyTime / completeTime, UTC


def _split_signature(raw: str) -> tuple[str, str | None]:
    """The raw parameter string without its `signature=` part, and that signature."""
    if not raw:
        return "", None
    kept, signature = [], None
    for part in raw.split("&"):
        if part.startswith("signature="):
            signature = part[len("signature=") :]
        else:
            kept.append(part)
    return "&".join(kept), signature


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _int_param(params: dict, name: str, default: int | None = None) -> int | None:
    value = params.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise Refusal("malformed", param=name) from None


class BinanceVenue(Venue):
    name = "binance"

    def client_key(self, request: Request) -> str:
        return request.headers.get("X-MBX-APIKEY") or request.client

    def params(self, request: Request) -> dict:
        pairs = parse_qsl(request.raw_query, keep_blank_values=True)
        if request.body:
            pairs += parse_qsl(request.body.decode("utf-8"), keep_blank_values=True)
        return {k: v for k, v in pairs if k != "signature"}

    def authenticate(self, request: Request) -> Account:
        api_key = request.headers.get("X-MBX-APIKEY")
        if not api_key:
            raise Refusal("api_key_missing")
        account = self.books.account_by_key(api_key)
        if account is None:
            raise Refusal("api_key_invalid")
        query, query_signature = _split_signature(request.raw_query)
        body, body_signature = _split_signature(request.body.decode("utf-8"))
        signature = query_signature or body_signature
        params = self.params(request)
        if not signature:
            raise Refusal("param_missing", param="signature")
        timestamp = _int_param(params, "timestamp")
        if timestamp is None:
            raise Refusal("param_missing", param="timestamp")
        recv_window = _int_param(params, "recvWindow", DEFAULT_RECV_WINDOW_MS)
        if recv_window > MAX_RECV_WINDOW_MS:
            raise Refusal("recv_window_too_large")
        expected = hmac.new(
            account.secret.encode(), (query + body).encode(), hashlib.sha256
        ).hexdigest()
        if not hmac.compare_digest(expected, signature.lower()):
            raise Refusal("bad_signature")
        self._check_window(timestamp, recv_window)
        return account

    def _check_window(self, timestamp: int, recv_window: int) -> None:
        server_time = self.books.server_time_ms()
        if timestamp >= server_time + AHEAD_TOLERANCE_MS:
            raise Refusal("timestamp_ahead")
        if server_time - timestamp > recv_window:
            raise Refusal("timestamp_outside_window")

    def still_valid(self, params: dict) -> None:
        """Binance checks the window again when the request reaches its matching engine: a
        request held longer than its recvWindow is refused there ("outside of the ME
        recvWindow")."""
        timestamp = _int_param(params, "timestamp") or 0
        self._check_window(timestamp, _int_param(params, "recvWindow", DEFAULT_RECV_WINDOW_MS))

    def refuse(self, refusal: Refusal) -> Response:
        status, code, message = ERRORS[refusal.reason]
        return json_response(status, {"code": code, "msg": message.format(**refusal.details)})

    def throttled(self, throttle: Throttle) -> Response:
        headers = {"Retry-After": str(throttle.retry_after)}
        policy = self.books.limiter.policy
        if throttle.status == 418:
            until = _ms(datetime.now(UTC)) + throttle.retry_after * 1000
            message = (
                f"Way too much request weight used; IP banned until {until}. "
                "Please use WebSocket Streams for live updates to avoid bans."
            )
        else:
            message = (
                f"Too much request weight used; current limit is {policy.limit} request weight "
                f"per {policy.window_seconds:g} SECOND. Please use WebSocket Streams for live "
                "updates to avoid polling the API."
            )
        return json_response(throttle.status, {"code": -1003, "msg": message}, headers)

    def maintenance(self) -> Response:
        return json_response(503, {"code": 1, "msg": "System is under maintenance."})

    # --- public ----------------------------------------------------------------------------

    def ping(self, params: dict, account: None) -> Response:
        return json_response(200, {})

    def time(self, params: dict, account: None) -> Response:
        return json_response(200, {"serverTime": self.books.server_time_ms()})

    def system_status(self, params: dict, account: None) -> Response:
        if self.books.under_maintenance():
            return json_response(200, {"status": 1, "msg": "system_maintenance"})
        return json_response(200, {"status": 0, "msg": "normal"})

    def exchange_info(self, params: dict, account: None) -> Response:
        symbols = [
            {
                "symbol": f"{code}USDT",
                "status": "TRADING",
                "baseAsset": code,
                "baseAssetPrecision": 8,
                "quoteAsset": "USDT",
                "quotePrecision": 8,
                "quoteAssetPrecision": 8,
                "baseCommissionPrecision": 8,
                "quoteCommissionPrecision": 8,
                "orderTypes": ["LIMIT", "LIMIT_MAKER", "MARKET"],
                "icebergAllowed": True,
                "ocoAllowed": True,
                "quoteOrderQtyMarketAllowed": True,
                "allowTrailingStop": False,
                "cancelReplaceAllowed": True,
                "isSpotTradingAllowed": True,
                "isMarginTradingAllowed": False,
                "filters": [
                    {
                        "filterType": "PRICE_FILTER",
                        "minPrice": "0.01000000",
                        "maxPrice": "1000000.00000000",
                        "tickSize": "0.01000000",
                    },
                    {
                        "filterType": "LOT_SIZE",
                        "minQty": "0.00001000",
                        "maxQty": "9000.00000000",
                        "stepSize": "0.00001000",
                    },
                ],
                "permissions": [],
                "permissionSets": [["SPOT"]],
                "defaultSelfTradePreventionMode": "EXPIRE_MAKER",
                "allowedSelfTradePreventionModes": ["EXPIRE_TAKER", "EXPIRE_MAKER", "EXPIRE_BOTH"],
            }
            for code in self.books.coins
            if code != "USDT"
        ]
        return json_response(200, self._exchange_info(symbols))

    def derivatives_info(self, params: dict, account: None) -> Response:
        # The local exchange lists no futures; ccxt loads these by default.
        return json_response(200, self._exchange_info([]))

    def _exchange_info(self, symbols: list) -> dict:
        return {
            "timezone": "UTC",
            "serverTime": self.books.server_time_ms(),
            "rateLimits": [
                {
                    "rateLimitType": "REQUEST_WEIGHT",
                    "interval": "MINUTE",
                    "intervalNum": 1,
                    "limit": 6000,
                }
            ],
            "exchangeFilters": [],
            "symbols": symbols,
        }

    # --- signed ----------------------------------------------------------------------------

    def margin_pairs(self, params: dict, account: Account) -> Response:
        # ccxt asks for margin pairs while loading markets; the local exchange has none.
        return json_response(200, [])

    def all_coins(self, params: dict, account: Account) -> Response:
        """GET /sapi/v1/capital/config/getall: coins, networks, fees, limits, balances."""
        with self.books.lock:
            balances = dict(account.balances)
        rows = []
        for coin in self.books.coins.values():
            free = plain(balances.get(coin.code, 0))
            rows.append(
                {
                    "coin": coin.code,
                    "depositAllEnable": True,
                    "withdrawAllEnable": True,
                    "name": coin.name,
                    "free": free,
                    "locked": "0",
                    "freeze": "0",
                    "withdrawing": "0",
                    "ipoing": "0",
                    "ipoable": "0",
                    "storage": "0",
                    "isLegalMoney": False,
                    "trading": True,
                    "networkList": [
                        {
                            "network": network.id,
                            "coin": coin.code,
                            "withdrawIntegerMultiple": plain(Decimal(1).scaleb(-network.decimals)),
                            "isDefault": network.is_default,
                            "depositEnable": True,
                            "withdrawEnable": True,
                            "depositDesc": "",
                            "withdrawDesc": "",
                            "specialTips": "",
                            "specialWithdrawTips": "",
                            "name": network.name,
                            "resetAddressStatus": False,
                            "addressRegex": network.address_regex,
                            "addressRule": "",
                            "memoRegex": "",
                            "withdrawFee": plain(network.withdraw_fee),
                            "withdrawMin": plain(network.withdraw_min),
                            "withdrawMax": "9999999999.99999999",
                            "withdrawInternalMin": "0.00000001",
                            "depositDust": "0.00000001",
                            "minConfirm": 12,
                            "unLockConfirm": 0,
                            "sameAddress": False,
                            "estimatedArrivalTime": 5,
                            "busy": False,
                            "contractAddressUrl": "",
                            "contractAddress": "",
                        }
                        for network in coin.networks.values()
                    ],
                }
            )
        return json_response(200, rows)

    def account_info(self, params: dict, account: Account) -> Response:
        """GET /api/v3/account (spot balances)."""
        with self.books.lock:
            balances = dict(account.balances)
        codes = sorted(set(self.books.coins) | set(balances))
        if params.get("omitZeroBalances") == "true":
            codes = [c for c in codes if balances.get(c, 0) != 0]
        rows = [{"asset": c, "free": plain(balances.get(c, 0)), "locked": "0"} for c in codes]
        return json_response(
            200,
            {
                "makerCommission": 10,
                "takerCommission": 10,
                "buyerCommission": 0,
                "sellerCommission": 0,
                "commissionRates": {
                    "maker": "0.00100000",
                    "taker": "0.00100000",
                    "buyer": "0.00000000",
                    "seller": "0.00000000",
                },
                "canTrade": True,
                "canWithdraw": True,
                "canDeposit": True,
                "brokered": False,
                "requireSelfTradePrevention": False,
                "preventSor": False,
                "updateTime": self.books.server_time_ms(),
                "accountType": "SPOT",
                "balances": rows,
                "permissions": ["SPOT"],
                "uid": zlib.crc32(account.name.encode()),
            },
        )

    def withdraw(self, params: dict, account: Account) -> Response:
        """POST /sapi/v1/capital/withdraw/apply -> {"id": ...}."""
        for name in ("coin", "address", "amount"):
            if not params.get(name):
                raise Refusal("param_missing", param=name)
        withdrawal = self.books.withdraw(
            account,
            coin=params["coin"],
            network=params.get("network") or None,
            address=params["address"],
            tag=params.get("addressTag") or None,
            amount=to_decimal(params["amount"]),
            client_id=params.get("withdrawOrderId") or None,
        )
        return self.accepted(withdrawal, 200, lambda w: {"id": w.id})

    def withdraw_history(self, params: dict, account: Account) -> Response:
        """GET /sapi/v1/capital/withdraw/history, newest first."""
        rows = self.books.visible_withdrawals(account)
        client_id = params.get("withdrawOrderId")
        default_days = 7 if client_id else 90
        rows = self._in_time_range(rows, params, default_days)
        if client_id:
            rows = [w for w in rows if w.client_id == client_id]
        if params.get("coin"):
            rows = [w for w in rows if w.coin == params["coin"]]
        if params.get("idList"):
            wanted = set(params["idList"].split(","))
            rows = [w for w in rows if w.id in wanted]
        status = _int_param(params, "status")
        if status is not None:
            rows = [w for w in rows if WITHDRAWAL_STATUS_CODES[w.status] == status]
        rows = self._page(rows, params)
        return json_response(200, [self._withdrawal_row(w) for w in rows])

    def deposit_history(self, params: dict, account: Account) -> Response:
        """GET /sapi/v1/capital/deposit/hisrec, newest first."""
        rows = self._in_time_range(self.books.account_deposits(account), params, 90)
        if params.get("coin"):
            rows = [d for d in rows if d.coin == params["coin"]]
        if params.get("txId"):
            rows = [d for d in rows if d.txid == params["txId"]]
        status = _int_param(params, "status")
        if status is not None:
            rows = [d for d in rows if DEPOSIT_STATUS_CODES[d.status] == status]
        rows = self._page(rows, params)
        return json_response(200, [self._deposit_row(d) for d in rows])

    def deposit_address(self, params: dict, account: Account) -> Response:
        """GET /sapi/v1/capital/deposit/address."""
        if not params.get("coin"):
            raise Refusal("param_missing", param="coin")
        coin = self.books.coin(params["coin"])
        network = coin.network(params.get("network") or None)
        address = account.deposit_address(self.name, coin.code, network)
        return json_response(200, {"address": address, "coin": coin.code, "tag": "", "url": ""})

    # --- rows ------------------------------------------------------------------------------

    def _in_time_range(self, rows: list, params: dict, default_days: int) -> list:
        now = self.books.now()
        end = _int_param(params, "endTime")
        start = _int_param(params, "startTime")
        end_at = datetime.fromtimestamp(end / 1000, UTC) if end is not None else now
        start_at = (
            datetime.fromtimestamp(start / 1000, UTC)
            if start is not None
            else end_at - timedelta(days=default_days)
        )
        return [r for r in rows if start_at <= r.created_at <= end_at]

    @staticmethod
    def _page(rows: list, params: dict) -> list:
        offset = _int_param(params, "offset", 0)
        limit = min(_int_param(params, "limit", 1000), 1000)
        return rows[offset : offset + limit]

    @staticmethod
    def _withdrawal_row(w: Withdrawal) -> dict:
        row = {
            "id": w.id,
            "amount": plain(w.sent),
            "transactionFee": plain(w.fee),
            "coin": w.coin,
            "status": WITHDRAWAL_STATUS_CODES[w.status],
            "address": w.address,
            "applyTime": w.created_at.strftime(TIME_FORMAT),
            "network": w.network,
            "transferType": 0,
            "info": "",
            "confirmNo": 12 if w.status == COMPLETED else 0,
            "walletType": 0,
            "txKey": "",
        }
        if w.tag:
            row["addressTag"] = w.tag
        if w.txid:
            row["txId"] = w.txid
        if w.client_id:
            row["withdrawOrderId"] = w.client_id
        if w.completed_at:
            row["completeTime"] = w.completed_at.strftime(TIME_FORMAT)
        return row

    @staticmethod
    def _deposit_row(d: Deposit) -> dict:
        row = {
            "id": str(int(d.id, 16) % 10**18),
            "amount": plain(d.amount),
            "coin": d.coin,
            "network": d.network,
            "status": DEPOSIT_STATUS_CODES[d.status],
            "address": d.address,
            "addressTag": d.tag or "",
            "txId": d.txid,
            "insertTime": _ms(d.created_at),
            "transferType": 0,
            "confirmTimes": "12/12" if d.status == COMPLETED else "1/12",
            "unlockConfirm": 0,
            "walletType": 0,
        }
        if d.completed_at:
            row["completeTime"] = _ms(d.completed_at)
        return row

    routes = {
        ("GET", "/api/v3/ping"): Route("ping", ping, signed=False),
        ("GET", "/api/v3/time"): Route("time", time, signed=False),
        ("GET", "/api/v3/exchangeInfo"): Route("markets", exchange_info, signed=False),
        ("GET", "/fapi/v1/exchangeInfo"): Route("markets", derivatives_info, signed=False),
        ("GET", "/dapi/v1/exchangeInfo"): Route("markets", derivatives_info, signed=False),
        ("GET", "/sapi/v1/system/status"): Route("status", system_status, signed=False),
        ("GET", "/sapi/v1/margin/allPairs"): Route("markets", margin_pairs, signed=True),
        ("GET", "/sapi/v1/margin/isolated/allPairs"): Route("markets", margin_pairs, signed=True),
        ("GET", "/sapi/v1/capital/config/getall"): Route("currencies", all_coins, signed=True),
        ("GET", "/api/v3/account"): Route("balance", account_info, signed=True),
        ("POST", "/sapi/v1/capital/withdraw/apply"): Route("withdraw", withdraw, signed=True),
        ("GET", "/sapi/v1/capital/withdraw/history"): Route(
            "withdrawals", withdraw_history, signed=True
        ),
        ("GET", "/sapi/v1/capital/deposit/hisrec"): Route("deposits", deposit_history, signed=True),
        ("GET", "/sapi/v1/capital/deposit/address"): Route(
            "deposit_address", deposit_address, signed=True
        ),
    }


def make_books(coins: dict[str, Coin], accounts: list[Account]) -> Books:
    """Binance takes the withdrawal fee out of the amount asked for; ids are 32 hex digits."""
    return Books("binance", coins=coins, accounts=accounts, fee_mode=FEE_DEDUCTED, dashed_ids=False)

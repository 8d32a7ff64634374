"""Upbit (https://docs.upbit.com): JWT-signed requests (a nonce and a SHA-512 hash of the
query) with no time bound at all, no client withdrawal id, deposit records without an
address, the network fee charged on top of the amount asked for. Its clock is read from the
Date header of its answers (whole seconds).

``KoreanExchange`` is the REST shape Upbit and Bithumb's API 2.0 share (``/v1/withdraws``,
``/v1/deposits``, ``/v1/withdraws/chance``, records with ``uuid``, ``currency``,
``net_type``, ``state``, ``created_at`` in KST): each names its paths (``api``) and its
status vocabulary."""

from typing import Any

import ccxt

from venues.cex.exchanges.base import Dialect, Order, Rules, iso_time, places_step
from venues.cex.records import Record, decimal


class KoreanExchange(Dialect):
    # ccxt's implicit method names are "<api><Method><Path>": Upbit's paths start below
    # /v1, Bithumb's include it.
    path_prefix = ""
    withdrawal_statuses: dict[str, str] = {}
    deposit_statuses: dict[str, str] = {}

    def api(self, exchange: Any, method: str, path: str, params: dict[str, Any]) -> Any:
        scope = "public" if path == "MarketAll" else "private"
        return getattr(exchange, f"{scope}{method}{self.path_prefix}{path}")(params)

    def public_ping(self, exchange: Any) -> None:
        self.api(exchange, "Get", "MarketAll", {})

    def free_balance(self, exchange: Any, coin: str) -> Any:
        for row in self.api(exchange, "Get", "Accounts", {}):
            if row.get("currency") == coin:
                return decimal(row.get("balance"))
        return decimal(0)

    def deposit_address(self, exchange: Any, coin: str, network_id: str) -> str:
        found = self.api(
            exchange, "Get", "DepositsCoinAddress", {"currency": coin, "net_type": network_id}
        )
        return str(found.get("deposit_address") or "")

    def rules(self, exchange: Any, coin: str, network_id: str) -> Rules:
        chance = self.api(
            exchange, "Get", "WithdrawsChance", {"currency": coin, "net_type": network_id}
        )
        limit = chance.get("withdraw_limit") or {}
        currency = chance.get("currency") or {}
        fixed = limit.get("fixed")
        return Rules(
            step=places_step(fixed) if fixed is not None else decimal(0),
            minimum=decimal(limit.get("minimum")),
            fee=decimal(currency.get("withdraw_fee")),
        )

    def withdraw(self, exchange: Any, order: Order) -> dict[str, Any]:
        request = {
            "currency": order.coin,
            "net_type": order.network_id,
            "amount": order.amount,
            "address": order.address,
            **order.extra,
        }
        return self.api(exchange, "Post", "WithdrawsCoin", request)

    def withdrawal_id(self, answer: dict[str, Any]) -> str:
        return str(answer.get("uuid") or "")

    def withdrawal_by_id(self, exchange: Any, coin: str, withdrawal_id: str) -> Record | None:
        try:
            row = self.api(exchange, "Get", "Withdraw", {"uuid": withdrawal_id, "currency": coin})
        except ccxt.BaseError as exc:
            if isinstance(exc, ccxt.OrderNotFound) or "withdraw_not_found" in str(exc):
                return None
            raise
        return self.withdrawal(row)

    def recent_withdrawals(self, exchange: Any, coin: str) -> list[Record]:
        rows = self.api(exchange, "Get", "Withdraws", {"currency": coin, "limit": 100})
        return [self.withdrawal(row) for row in rows]

    def deposits_by_txid(self, exchange: Any, coin: str, txid: str) -> list[Record]:
        rows = self.api(exchange, "Get", "Deposits", {"currency": coin, "txids[]": txid})
        return [self.deposit(row) for row in rows]

    def withdrawal(self, info: dict[str, Any]) -> Record:
        return self._record(info, self.withdrawal_statuses)

    def deposit(self, info: dict[str, Any]) -> Record:
        return self._record(info, self.deposit_statuses)

    @staticmethod
    def _record(info: dict[str, Any], statuses: dict[str, str]) -> Record:
        state = str(info.get("state") or "").upper()
        return Record(
            id=str(info.get("uuid", "")),
            coin=str(info.get("currency", "")),
            network=str(info.get("net_type") or ""),
            amount=decimal(info.get("amount")),
            fee=decimal(info.get("fee")),
            status=statuses.get(state, "pending"),
            txid=str(info.get("txid") or ""),
            address="",
            created_at=iso_time(info.get("created_at")),
            raw_status=state,
        )


class Upbit(KoreanExchange):
    kind = "upbit"
    # https://docs.upbit.com/kr/reference/get-withdrawal (state): WAITING, PROCESSING, DONE,
    # FAILED, CANCELLED, REJECTED
    withdrawal_statuses = {
        "DONE": "completed",
        "FAILED": "failed",
        "REJECTED": "failed",
        "CANCELLED": "failed",
        "CANCELED": "failed",
    }
    deposit_statuses = {"ACCEPTED": "completed", "REJECTED": "failed", "CANCELLED": "failed"}

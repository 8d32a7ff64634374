"""The exchange calls the executors make, one function per question, through ccxt's unified
API; every ccxt exception leaves as the executor taxonomy's (``errors.translate``)."""

import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeVar

import ccxt

from venues.cex import records
from venues.cex.client import client, secrets_of
from venues.cex.config import ExchangeAccount, plain
from venues.cex.errors import told_to_wait, translate

T = TypeVar("T")


def ask(account: ExchangeAccount, phase: str, call: Callable[[Any], T]) -> T:
    """``call(ccxt_client)`` with its errors translated for ``phase``."""
    exchange = client(account)
    exchange.qtg_max_wait = 2.0
    try:
        return call(exchange)
    except Exception as exc:
        raise translate(exc, phase=phase, secrets=secrets_of(account)) from None


def preflight(account: ExchangeAccount, coin: str, amount: Decimal) -> dict[str, Any]:
    """Before a withdrawal: the exchange is up (Binance's system status; Upbit has none),
    the keys sign (a private read: the exchange checks the signature), and the account holds
    the amount. A shortfall is refused here, before anything is sent."""

    def check(exchange: Any) -> dict[str, Any]:
        if account.kind == "binance":
            status = exchange.fetch_status()
            if status.get("status") != "ok":
                raise ccxt.OnMaintenance(f"{exchange.id} system status: {status.get('status')}")
        exchange.load_markets()
        balance = exchange.fetch_balance()
        free = records.decimal((balance.get(coin) or {}).get("free"))
        if free < amount:
            raise ccxt.InsufficientFunds(f"{coin} balance {free} is less than {amount}")
        return {"free_balance": plain(free)}

    return ask(account, "prepare", check)


def deposit_address(account: ExchangeAccount, coin: str, network_id: str) -> str:
    """The account's deposit address for ``coin`` on ``network_id``, as the exchange gives it."""
    found = ask(
        account,
        "prepare",
        lambda exchange: exchange.fetch_deposit_address(coin, {"network": network_id}),
    )
    return str(found.get("address") or "")


def withdraw(
    account: ExchangeAccount,
    *,
    coin: str,
    amount: Decimal,
    address: str,
    network_id: str,
    client_id: str,
    budget_seconds: float,
) -> tuple[str, int]:
    """Send the withdrawal; its id, and how many times the exchange said to wait first. A
    429/418 answered to it means the exchange refused before acting: the same request (the
    same client id) is sent again after the wait it named, for as long as ``budget_seconds``
    allows; then the wait is the caller's (TransientError)."""
    params: dict[str, Any] = {"network": network_id}
    if account.kind == "binance":
        params["withdrawOrderId"] = client_id
    exchange = client(account)
    deadline = time.monotonic() + budget_seconds
    waits = 0
    while True:
        exchange.qtg_max_wait = max(0.0, deadline - time.monotonic())
        try:
            answer = exchange.withdraw(coin, plain(amount), address, params=dict(params))
            return str(answer.get("id") or (answer.get("info") or {}).get("uuid") or ""), waits
        except Exception as exc:
            wait = told_to_wait(exc)
            if wait is not None and time.monotonic() + wait < deadline:
                waits += 1
                time.sleep(wait)
                continue
            raise translate(exc, phase="submit", secrets=secrets_of(account)) from None


def withdrawals_by_client_id(
    account: ExchangeAccount, coin: str, client_id: str, phase: str = "recover"
) -> list[records.Record]:
    """Binance: the withdrawals carrying ``withdrawOrderId`` = ``client_id``."""
    rows = ask(
        account,
        phase,
        lambda exchange: exchange.fetch_withdrawals(
            coin, None, None, {"withdrawOrderId": client_id}
        ),
    )
    found = [records.withdrawal(account.kind, row.get("info") or {}) for row in rows]
    return [record for record in found if record.client_id == client_id]


def withdrawal_by_id(
    account: ExchangeAccount, coin: str, withdrawal_id: str, phase: str = "observe"
) -> records.Record | None:
    """The withdrawal with the exchange's id (None while its history does not show it)."""
    if account.kind == "binance":
        rows = ask(
            account,
            phase,
            lambda exchange: exchange.fetch_withdrawals(
                coin, None, None, {"idList": withdrawal_id}
            ),
        )
        found = [records.withdrawal("binance", row.get("info") or {}) for row in rows]
        return next((record for record in found if record.id == withdrawal_id), None)
    try:
        row = ask(account, phase, lambda exchange: exchange.fetch_withdrawal(withdrawal_id, coin))
    except Exception as exc:
        if "withdraw_not_found" in str(exc):
            return None
        raise
    return records.withdrawal("upbit", row.get("info") or {})


def recent_withdrawals(account: ExchangeAccount, coin: str) -> list[records.Record]:
    """The newest withdrawals of ``coin`` (Upbit: one page of 100, newest first)."""
    rows = ask(account, "recover", lambda exchange: exchange.fetch_withdrawals(coin, None, 100))
    return [records.withdrawal(account.kind, row.get("info") or {}) for row in rows]


def deposits_by_txid(account: ExchangeAccount, coin: str, txid: str) -> list[records.Record]:
    """The deposits of ``coin`` the exchange records for transaction ``txid``."""
    params = {"txId": txid} if account.kind == "binance" else {"txids[]": txid}
    rows = ask(
        account, "observe", lambda exchange: exchange.fetch_deposits(coin, None, None, params)
    )
    found = [records.deposit(account.kind, row.get("info") or {}) for row in rows]
    return [record for record in found if same_txid(record.txid, txid)]


def same_txid(a: str, b: str) -> bool:
    if a.startswith("0x") or b.startswith("0x"):
        return a.lower() == b.lower()
    return a == b

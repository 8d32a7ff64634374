"""Binance (https://developers.binance.com/docs/wallet): HMAC-SHA256 signed requests that carry
a ``timestamp`` and a ``recvWindow`` the exchange enforces, a client withdrawal id
(``withdrawOrderId``) the history can be asked for, deposit records with their address, the
network fee taken out of the amount asked for."""

import time
from datetime import UTC, datetime
from typing import Any

import ccxt

from venues.cex.exchanges.base import Dialect, Order, Rules
from venues.cex.records import Record, decimal

# https://developers.binance.com/docs/wallet/capital/withdraw-history (status)
WITHDRAWAL_STATUSES = {6: "completed", 1: "failed", 3: "failed", 5: "failed"}
DEPOSIT_STATUSES = {1: "completed", 6: "completed", 7: "failed"}
# Binance refuses a recvWindow above a minute.
MAX_RECV_WINDOW_SECONDS = 60.0


def _time(value: Any) -> datetime | None:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str) and value:
        try:
            return datetime.strptime(value, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            return None
    return None


def _status(table: dict[int, str], value: Any) -> str:
    try:
        return table.get(int(value), "pending")
    except (TypeError, ValueError):
        return "pending"


def _spot_error_tables() -> dict[str, Any]:
    """ccxt's binance applies its spot/wallet error table only at https://api.binance.com/; at
    an overridden URL it must be merged into the common table, or -4026 (insufficient
    balance) would read as a bad request and -4035 (not whitelisted) as a bare error."""
    spot = ccxt.binance().describe()["exceptions"]["spot"]
    return {"exact": dict(spot.get("exact", {})), "broad": dict(spot.get("broad", {}))}


class Binance(Dialect):
    kind = "binance"
    client_ids = True
    deposit_addresses_in_records = True
    fee_deducted = True
    max_validity_seconds = MAX_RECV_WINDOW_SECONDS
    clock_resolution_ms = 1

    def client_options(self, *, moved: bool) -> dict[str, Any]:
        return {"exceptions": _spot_error_tables()} if moved else {}

    def check_up(self, exchange: Any) -> None:
        status = exchange.fetch_status()
        if status.get("status") != "ok":
            raise ccxt.OnMaintenance(f"{exchange.id} system status: {status.get('status')}")

    def server_time(self, exchange: Any) -> tuple[int, int, int]:
        before = time.time()
        server_ms = int(exchange.fetch_time())
        after = time.time()
        return server_ms, int((before + after) / 2 * 1000), int((after - before) * 500)

    def rules(self, exchange: Any, coin: str, network_id: str) -> Rules:
        for row in exchange.sapiGetCapitalConfigGetall():
            if row.get("coin") != coin:
                continue
            for network in row.get("networkList") or []:
                if network.get("network") == network_id:
                    return Rules(
                        step=decimal(network.get("withdrawIntegerMultiple")),
                        minimum=decimal(network.get("withdrawMin")),
                        fee=decimal(network.get("withdrawFee")),
                    )
        raise LookupError(f"binance lists no {coin} on network {network_id}")

    def withdraw(self, exchange: Any, order: Order) -> dict[str, Any]:
        request: dict[str, Any] = {
            **order.extra,
            "coin": order.coin,
            "address": order.address,
            "amount": order.amount,
            "network": order.network_id,
            "withdrawOrderId": order.client_id,
        }
        if order.validity is not None:
            # Signed with the time the fence let it go and a window that ends at the fence's
            # deadline: Binance refuses it after that, however late it arrives.
            request["timestamp"] = order.validity.timestamp_ms
            request["recvWindow"] = order.validity.window_ms
        return exchange.sapiPostCapitalWithdrawApply(request)

    def withdrawal_id(self, answer: dict[str, Any]) -> str:
        return str(answer.get("id") or "")

    def withdrawals_by_client_id(self, exchange: Any, coin: str, client_id: str) -> list[Record]:
        rows = exchange.fetch_withdrawals(coin, None, None, {"withdrawOrderId": client_id})
        found = [self.withdrawal(row.get("info") or {}) for row in rows]
        return [record for record in found if record.client_id == client_id]

    def withdrawal_by_id(self, exchange: Any, coin: str, withdrawal_id: str) -> Record | None:
        rows = exchange.fetch_withdrawals(coin, None, None, {"idList": withdrawal_id})
        found = [self.withdrawal(row.get("info") or {}) for row in rows]
        return next((record for record in found if record.id == withdrawal_id), None)

    def deposits_by_txid(self, exchange: Any, coin: str, txid: str) -> list[Record]:
        rows = exchange.fetch_deposits(coin, None, None, {"txId": txid})
        return [self.deposit(row.get("info") or {}) for row in rows]

    def withdrawal(self, info: dict[str, Any]) -> Record:
        status = info.get("status")
        return Record(
            id=str(info.get("id", "")),
            coin=str(info.get("coin", "")),
            network=str(info.get("network", "")),
            amount=decimal(info.get("amount")),
            fee=decimal(info.get("transactionFee")),
            status=_status(WITHDRAWAL_STATUSES, status),
            txid=str(info.get("txId") or ""),
            address=str(info.get("address") or ""),
            created_at=_time(info.get("applyTime")),
            client_id=str(info.get("withdrawOrderId") or ""),
            raw_status=str(status),
        )

    def deposit(self, info: dict[str, Any]) -> Record:
        status = info.get("status")
        return Record(
            id=str(info.get("id", "")),
            coin=str(info.get("coin", "")),
            network=str(info.get("network", "")),
            amount=decimal(info.get("amount")),
            fee=decimal(0),
            status=_status(DEPOSIT_STATUSES, status),
            txid=str(info.get("txId") or ""),
            address=str(info.get("address") or ""),
            created_at=_time(info.get("insertTime")),
            raw_status=str(status),
        )

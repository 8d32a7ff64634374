"""What the two exchanges' histories say, read from each record's raw ``info`` (ccxt's unified
fields round amounts to floats and leave Upbit's newer states unmapped), as exact values."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

# Binance: https://developers.binance.com/docs/wallet/capital/withdraw-history (status).
BINANCE_WITHDRAWAL = {6: "completed", 1: "failed", 3: "failed", 5: "failed"}
BINANCE_DEPOSIT = {1: "completed", 6: "completed", 7: "failed"}
# Upbit: WAITING, PROCESSING, DONE, FAILED, REJECTED, CANCELLED (also spelt CANCELED).
UPBIT_WITHDRAWAL = {
    "DONE": "completed",
    "FAILED": "failed",
    "REJECTED": "failed",
    "CANCELLED": "failed",
    "CANCELED": "failed",
}
UPBIT_DEPOSIT = {"ACCEPTED": "completed", "REJECTED": "failed", "CANCELLED": "failed"}


@dataclass(frozen=True)
class Record:
    """A withdrawal or deposit as the exchange shows it. ``status``: pending, completed or
    failed; ``amount``: what went (or came) on chain; ``address`` empty where the exchange
    does not report it (Upbit's deposits)."""

    id: str
    coin: str
    network: str
    amount: Decimal
    fee: Decimal
    status: str
    txid: str
    address: str
    created_at: datetime | None
    client_id: str = ""
    raw_status: str = ""

    def as_evidence(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "coin": self.coin,
            "network": self.network,
            "amount": str(self.amount),
            "fee": str(self.fee),
            "status": self.status,
            "exchange_status": self.raw_status,
            "txid": self.txid,
            "address": self.address,
        }


def decimal(value: Any) -> Decimal:
    try:
        return Decimal(str(value if value not in (None, "") else "0"))
    except InvalidOperation:
        return Decimal(0)


def _binance_time(value: Any) -> datetime | None:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str) and value:
        try:
            return datetime.strptime(value, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        except ValueError:
            return None
    return None


def _upbit_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except (TypeError, ValueError):
        return None


def withdrawal(kind: str, info: dict[str, Any]) -> Record:
    if kind == "binance":
        status = info.get("status")
        return Record(
            id=str(info.get("id", "")),
            coin=str(info.get("coin", "")),
            network=str(info.get("network", "")),
            amount=decimal(info.get("amount")),
            fee=decimal(info.get("transactionFee")),
            status=BINANCE_WITHDRAWAL.get(int(status), "pending")
            if status is not None
            else "pending",
            txid=str(info.get("txId") or ""),
            address=str(info.get("address") or ""),
            created_at=_binance_time(info.get("applyTime")),
            client_id=str(info.get("withdrawOrderId") or ""),
            raw_status=str(status),
        )
    return _upbit_record(info, UPBIT_WITHDRAWAL)


def _upbit_record(info: dict[str, Any], statuses: dict[str, str]) -> Record:
    """Upbit's withdrawals and deposits share one shape (and carry no address)."""
    state = str(info.get("state") or "").upper()
    return Record(
        id=str(info.get("uuid", "")),
        coin=str(info.get("currency", "")),
        network=str(info.get("net_type", "")),
        amount=decimal(info.get("amount")),
        fee=decimal(info.get("fee")),
        status=statuses.get(state, "pending"),
        txid=str(info.get("txid") or ""),
        address="",
        created_at=_upbit_time(info.get("created_at")),
        raw_status=state,
    )


def deposit(kind: str, info: dict[str, Any]) -> Record:
    if kind == "binance":
        status = info.get("status")
        return Record(
            id=str(info.get("id", "")),
            coin=str(info.get("coin", "")),
            network=str(info.get("network", "")),
            amount=decimal(info.get("amount")),
            fee=Decimal(0),
            status=BINANCE_DEPOSIT.get(int(status), "pending") if status is not None else "pending",
            txid=str(info.get("txId") or ""),
            address=str(info.get("address") or ""),
            created_at=_binance_time(info.get("insertTime")),
            raw_status=str(status),
        )
    return _upbit_record(info, UPBIT_DEPOSIT)

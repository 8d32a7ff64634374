"""A withdrawal or deposit as an exchange's history shows it, as exact values (each dialect in
``venues.cex.exchanges`` parses its own records from the raw answer: ccxt's unified fields
round amounts to floats and leave newer states unmapped)."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any


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

"""What every exchange dialect answers (``Dialect``), with the defaults most of them share.

Each call takes ``exchange``, the account's ccxt client (its signing is ccxt's), and returns
exact values: records are parsed from the raw answer (ccxt's unified fields round amounts to
floats), and amounts go on the wire as the decimal text the journal holds, never through
ccxt's rounding (``currency_to_precision``)."""

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import Any

from venues.cex.records import Record, decimal


@dataclass(frozen=True)
class Validity:
    """The time a signed request is valid for, in the exchange's own clock: it must not take
    effect after ``timestamp_ms + window_ms``."""

    timestamp_ms: int
    window_ms: int


@dataclass(frozen=True)
class Order:
    """A withdrawal as it is sent: ``amount`` is the journal's exact decimal text."""

    coin: str
    amount: str
    address: str
    network_id: str
    client_id: str
    validity: Validity | None
    extra: dict[str, Any]


@dataclass(frozen=True)
class Rules:
    """What the exchange allows for a withdrawal of one currency on one network."""

    step: Decimal  # the amount must be a whole multiple of this
    minimum: Decimal
    fee: Decimal

    def refusal(self, amount: Decimal, *, fee_deducted: bool = False) -> str:
        """Why ``amount`` cannot be withdrawn as it is ('' when it can): never rounded.
        ``fee_deducted``: the fee comes out of the amount, which must exceed it."""
        if self.step > 0 and amount % self.step != 0:
            places = max(0, -self.step.normalize().as_tuple().exponent)
            return (
                f"amount {amount} is finer than the exchange allows: multiples of "
                f"{format(self.step.normalize(), 'f')} ({places} decimal places)"
            )
        if amount < self.minimum:
            return f"amount {amount} is below the exchange's minimum withdrawal {self.minimum}"
        if fee_deducted and amount <= self.fee:
            return f"amount {amount} does not exceed the exchange's fee {self.fee}, taken out of it"
        return ""

    def as_evidence(self) -> dict[str, str]:
        return {
            name: format(value.normalize(), "f")
            for name, value in (("step", self.step), ("minimum", self.minimum), ("fee", self.fee))
        }


def places_step(places: Any) -> Decimal:
    """The step of an amount with ``places`` decimal places (8 -> 0.00000001)."""
    return Decimal(1).scaleb(-int(places))


class Dialect:
    kind: str = ""
    # Withdrawals carry our client id, and the history can be asked for it: recovery proves
    # presence and absence by it. Without, recovery matches the history by what was asked.
    client_ids: bool = False
    # Deposit records name the address they were credited to.
    deposit_addresses_in_records: bool = False
    # The network fee comes out of the amount asked for (else it is charged on top).
    fee_deducted: bool = False
    # The exchange refuses a signed request once its own validity has passed (Binance's
    # recvWindow): a request that was sent can take effect only until then. None: no bound
    # the exchange promises to enforce, so absence from its history never proves much.
    max_validity_seconds: float | None = None
    # The exchange's clock is read with this resolution (Date header: whole seconds).
    clock_resolution_ms: int = 1000

    # --- the account -------------------------------------------------------------------------

    def client_options(self, *, moved: bool) -> dict[str, Any]:
        """Extra ccxt options (``moved``: its URLs point elsewhere, e.g. at the stand-in)."""
        return {}

    def check_up(self, exchange: Any) -> None:
        """Raise (a ccxt error) when the exchange says it is down; the default asks nothing."""

    def free_balance(self, exchange: Any, coin: str) -> Decimal:
        exchange.load_markets()
        balance = exchange.fetch_balance()
        return decimal((balance.get(coin) or {}).get("free"))

    def deposit_address(self, exchange: Any, coin: str, network_id: str) -> str:
        found = exchange.fetch_deposit_address(coin, {"network": network_id})
        return str(found.get("address") or "")

    def server_time(self, exchange: Any) -> tuple[int, int, int]:
        """(the exchange's clock in ms, ours at the middle of the round trip, half the round
        trip in ms). The default reads the Date header of a cheap public answer."""
        before = time.time()
        self.public_ping(exchange)
        after = time.time()
        headers = getattr(exchange, "last_response_headers", None) or {}
        value = headers.get("Date") if hasattr(headers, "get") else None
        if not value:
            raise LookupError(f"{self.kind} answered without a Date header")
        server = parsedate_to_datetime(value).astimezone(UTC)
        # The header drops the fraction of its second: its middle is the best guess.
        server_ms = int(server.timestamp() * 1000) + self.clock_resolution_ms // 2
        middle_ms = int((before + after) / 2 * 1000)
        return server_ms, middle_ms, int((after - before) * 500)

    def public_ping(self, exchange: Any) -> None:
        exchange.fetch_markets()

    def rules(self, exchange: Any, coin: str, network_id: str) -> Rules:
        raise NotImplementedError

    # --- withdrawals -------------------------------------------------------------------------

    def withdraw(self, exchange: Any, order: Order) -> dict[str, Any]:
        """Send the withdrawal; the exchange's raw answer."""
        raise NotImplementedError

    def withdrawal_id(self, answer: dict[str, Any]) -> str:
        return str(answer.get("uuid") or answer.get("id") or "")

    def withdrawals_by_client_id(self, exchange: Any, coin: str, client_id: str) -> list[Record]:
        raise NotImplementedError(f"{self.kind} takes no client withdrawal id")

    def withdrawal_by_id(self, exchange: Any, coin: str, withdrawal_id: str) -> Record | None:
        raise NotImplementedError

    def recent_withdrawals(self, exchange: Any, coin: str) -> list[Record]:
        rows = exchange.fetch_withdrawals(coin, None, 100)
        return [self.withdrawal(row.get("info") or {}) for row in rows]

    def deposits_by_txid(self, exchange: Any, coin: str, txid: str) -> list[Record]:
        raise NotImplementedError

    # --- records -----------------------------------------------------------------------------

    def withdrawal(self, info: dict[str, Any]) -> Record:
        raise NotImplementedError

    def deposit(self, info: dict[str, Any]) -> Record:
        raise NotImplementedError


def iso_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except (TypeError, ValueError):
        return None

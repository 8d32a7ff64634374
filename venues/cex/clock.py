"""The exchange's clock, measured (``Dialect.server_time``: Binance's ``/api/v3/time``, the
Date header of Upbit's and Bithumb's answers) and used for what depends on it: the
timestamp a signed request carries (ccxt's ``timeDifference``) and the windows a history is
matched in (the measured skew, its uncertainty, plus a margin: never a fixed guess).

The last measurement per account is kept in ``CexClock`` (shown in the admin) and in memory
for ``REFRESH_SECONDS``."""

import time
from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from venues.cex.config import ExchangeAccount
from venues.cex.models import CexClock

REFRESH_SECONDS = 60.0
# Added to every window that depends on the exchange's clock: what the measurement cannot see
# (the exchange stamping a record a little after it accepted the request).
MARGIN_MS = 1000


@dataclass(frozen=True)
class Skew:
    """The exchange's clock minus ours (ms), and how far off that figure may be (ms)."""

    offset_ms: int
    uncertainty_ms: int

    @property
    def window(self) -> timedelta:
        """How far a time the exchange stamped may sit from the same moment on our clock."""
        return timedelta(milliseconds=abs(self.offset_ms) + self.uncertainty_ms + MARGIN_MS)

    def as_evidence(self) -> dict[str, int]:
        return {"skew_ms": self.offset_ms, "uncertainty_ms": self.uncertainty_ms}


_measured: dict[str, tuple[float, Skew]] = {}


def measure(account: ExchangeAccount, exchange) -> Skew:
    """Ask the exchange for its time now (``exchange``: the account's ccxt client), remember
    it, and make the client sign with it."""
    server_ms, ours_ms, half_trip_ms = account.dialect.server_time(exchange)
    skew = Skew(
        offset_ms=server_ms - ours_ms,
        uncertainty_ms=half_trip_ms + account.dialect.clock_resolution_ms // 2,
    )
    _measured[account.name] = (time.monotonic(), skew)
    CexClock.objects.update_or_create(
        account=account.name,
        defaults={
            "exchange": account.exchange,
            "skew_ms": skew.offset_ms,
            "uncertainty_ms": skew.uncertainty_ms,
            "measured_at": timezone.now(),
        },
    )
    adjust(exchange, skew)
    return skew


def adjust(exchange, skew: Skew) -> None:
    # ccxt signs with milliseconds() - timeDifference: the exchange's clock.
    exchange.options["timeDifference"] = -skew.offset_ms


def known(account: ExchangeAccount, exchange, *, refresh_seconds: float = REFRESH_SECONDS) -> Skew:
    """The account's skew, measured again once ``refresh_seconds`` have passed."""
    found = _measured.get(account.name)
    if found is None or time.monotonic() - found[0] > refresh_seconds:
        return measure(account, exchange)
    adjust(exchange, found[1])
    return found[1]


def forget() -> None:
    """Measure every account's clock again at its next use."""
    _measured.clear()


def exchange_ms(skew: Skew) -> int:
    """Now, on the exchange's clock."""
    return int(time.time() * 1000) + skew.offset_ms

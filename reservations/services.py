"""Reservations of hardcap headroom, one per movement request.

The movement lifecycle calls exactly these three functions (the seam); the hardcap models and
their rules live behind them.
"""

from typing import Any


class ReservationRefused(Exception):
    """Taking the reservation would break a limit (or no limit is configured)."""


def reservation_hold(*, request: Any, actor: Any) -> None:
    """Hold the request's amount against its hardcap; raise ReservationRefused if over."""


def reservation_consume(*, request: Any, actor: Any, reason: str = "") -> None:
    """The movement completed: the held amount is used up."""


def reservation_release(*, request: Any, actor: Any, reason: str = "") -> None:
    """The movement ended without money leaving: return the held amount."""

"""Amounts: a movement's Decimal to the integer units a Solana instruction carries.

SOL has 9 decimals (lamports); an SPL token has its mint's. A movement asking for more
precision than the token has is refused at create (``Executor.validate``): rounding would
move a different amount from the one approved.
"""

from decimal import Decimal, InvalidOperation

SOL_DECIMALS = 9
U64_MAX = 2**64 - 1


class AmountError(ValueError):
    """The amount cannot be moved as asked."""


def to_base_units(amount: Decimal, decimals: int) -> int:
    """``amount`` in base units (``1.5`` with 6 decimals -> ``1500000``), exactly."""
    try:
        scaled = Decimal(amount).scaleb(decimals)
    except (InvalidOperation, TypeError, ValueError):
        raise AmountError(f"{amount!r} is not a number") from None
    if not scaled.is_finite() or scaled != scaled.to_integral_value():
        raise AmountError(f"{amount} has more than {decimals} decimals")
    units = int(scaled)
    if units <= 0:
        raise AmountError(f"{amount} is not a positive amount")
    if units > U64_MAX:
        raise AmountError(f"{amount} is more than a Solana amount can hold")
    return units


def from_base_units(units: int, decimals: int) -> Decimal:
    """The Decimal an integer of base units stands for (``1500000``, 6 -> ``1.5``)."""
    return Decimal(units).scaleb(-decimals)

"""Money is Decimal; this is how an amount is written for people and for clients."""

from decimal import Decimal

from qtg.core.assets import asset_decimals


def format_amount(amount: Decimal | str | None, *, grouping: bool = False) -> str | None:
    """Plain digits without trailing zeros and never rounded: Decimal("100.500") -> "100.5".

    (``Decimal.normalize`` would round anything past the context's 28 digits.)
    """
    if amount is None:
        return None
    text = format(Decimal(amount), ",f" if grouping else "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def display_amount(amount: Decimal | str | None, asset: str) -> str:
    """An amount as the console shows it: thousands separators and the asset's decimals
    ("1,234,567.500000" USDC), never rounded (a finer amount keeps its digits); an asset
    whose decimals nobody configured is written as it is. Clients and exports get
    ``format_amount``'s plain digits."""
    if amount is None:
        return ""
    trimmed = format_amount(amount, grouping=True)
    places = asset_decimals(asset)
    if not places:
        return trimmed
    whole, _, fraction = trimmed.partition(".")
    return f"{whole}.{fraction.ljust(places, '0')}"


# Every amount column: 38 significant digits, 18 of them decimal places (the smallest unit
# of an 18-decimal token), so no venue's amount is ever rounded on the way in.
MONEY = {"max_digits": 38, "decimal_places": 18}

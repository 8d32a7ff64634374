"""The exchange's amount rules as a table: refused, never rounded."""

from decimal import Decimal

import pytest

from venues.cex.exchanges.base import Rules

RULES = Rules(step=Decimal("0.01"), minimum=Decimal("1"), fee=Decimal("5"))


@pytest.mark.parametrize(
    ("amount", "fee_deducted", "refused_because"),
    [
        ("10.00", False, ""),
        ("10.001", False, "finer than the exchange allows: multiples of 0.01 (2 decimal places)"),
        ("0.99", False, "below the exchange's minimum withdrawal 1"),
        ("3", False, ""),  # the fee is charged on top: 3 may go
        ("3", True, "does not exceed the exchange's fee 5, taken out of it"),
        ("5", True, "does not exceed the exchange's fee 5, taken out of it"),
        ("5.01", True, ""),
    ],
)
def test_an_amount_is_refused_for_its_first_broken_rule(amount, fee_deducted, refused_because):
    reason = RULES.refusal(Decimal(amount), fee_deducted=fee_deducted)

    assert (refused_because in reason) if refused_because else reason == ""
    if refused_because:
        assert reason.startswith(f"amount {amount} ")

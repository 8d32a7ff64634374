from decimal import Decimal

from qtg.core.money import format_amount


def test_amounts_are_written_without_trailing_zeros_and_never_rounded():
    assert format_amount(Decimal("125000.000000000000000000")) == "125000"
    assert format_amount(Decimal("100.500")) == "100.5"
    thirty_eight = "12345678901234567890.123456789012345678"
    assert format_amount(Decimal(thirty_eight)) == thirty_eight
    assert format_amount(Decimal("1E+3")) == "1000"
    assert format_amount(Decimal("1234567.5"), grouping=True) == "1,234,567.5"
    assert format_amount(None) is None

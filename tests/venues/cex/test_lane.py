"""The exchange lane end to end against the local exchange, through the workers' services."""

from decimal import Decimal

import pytest

from tests.execution.conftest import assert_history_replays
from tests.movements.drive import node
from tests.venues.cex.conftest import create, drive, story, withdrawals

pytestmark = [pytest.mark.standin, pytest.mark.django_db]


@pytest.mark.parametrize(
    "source,destination",
    [("binance-sender", "upbit-receiver"), ("upbit-sender", "binance-receiver")],
)
def test_a_movement_between_two_exchanges_completes_with_one_withdrawal(
    exchange, creator, source, destination
):
    request = drive(create(creator, source=source, destination=destination), exchange)

    assert request.request_state == "COMPLETED", story(request)
    kind, account = source.split("-")[0], source.split("-")[1]
    [sent] = withdrawals(exchange, kind, account)
    assert sent["client_id"] in (None, node(request, "withdraw").idempotency_key)
    assert node(request, "withdraw").external_ref == sent["id"]
    # The deposit counted is what left the source exchange, the network fee aside.
    deposit = node(request, "deposit_observe").result["deposit"]
    assert Decimal(deposit["amount"]) == Decimal(sent["sent"])
    assert deposit["txid"] == sent["txid"]
    assert_history_replays(request)


def test_a_split_withdrawal_from_both_exchanges_completes_when_both_deposits_match(
    exchange, creator
):
    request = drive(
        create(
            creator,
            template="split_withdraw",
            source="binance-sender",
            destination="binance-receiver",
            amount="50",
            params={"second_source": "upbit-sender"},
        ),
        exchange,
    )

    assert request.request_state == "COMPLETED", story(request)
    [from_binance] = withdrawals(exchange, "binance", "sender")
    [from_upbit] = withdrawals(exchange, "upbit", "sender")
    assert Decimal(from_binance["amount"]) + Decimal(from_upbit["amount"]) == Decimal("50")
    credited = node(request, "deposit_observe").result["deposits"]
    assert set(credited) == {from_binance["txid"], from_upbit["txid"]}
    # Binance sent its half less its fee; Upbit sent its half whole (its fee on top).
    assert credited[from_binance["txid"]]["deposit"]["amount"] == "24"
    assert credited[from_upbit["txid"]]["deposit"]["amount"] == "25"


@pytest.mark.parametrize(
    "source,destination",
    [("upbit-sender", "bithumb-receiver"), ("bithumb-sender", "upbit-receiver")],
)
def test_a_movement_between_upbit_and_bithumb_completes(exchange, creator, source, destination):
    request = drive(create(creator, source=source, destination=destination), exchange)

    assert request.request_state == "COMPLETED", story(request)
    kind, account = source.split("-")
    [sent] = withdrawals(exchange, kind, account)
    deposit = node(request, "deposit_observe").result["deposit"]
    assert deposit["txid"] == sent["txid"]
    # Both charge the fee on top: the 25 asked for arrive.
    assert Decimal(deposit["amount"]) == Decimal("25")

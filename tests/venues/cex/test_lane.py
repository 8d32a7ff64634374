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

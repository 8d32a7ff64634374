"""A deposit counts only if it is the withdrawal's: its txid, asset, network, amount (what was
asked less the fee the source exchange took) and, where the exchange reports it, address.
The test plays the chain: it settles the withdrawal and credits deposits by hand."""

import contextlib
from decimal import Decimal

import pytest

from movements.models import MovementAttention
from tests.movements.drive import node
from tests.venues.cex.conftest import create, drive, story, withdrawals

pytestmark = [pytest.mark.standin, pytest.mark.django_db]


def broadcast(exchange, request, kind, account):
    """Run until the withdrawal is accepted, then settle it on the source exchange (the
    withdrawal observer sees its txid); the withdrawal as the exchange recorded it."""
    drive(request, until=lambda r: node(r, "withdraw").node_state == "COMPLETED", deliver=False)
    [sent] = withdrawals(exchange, kind, account)
    settled = exchange.settle_withdrawal(kind, id=sent["id"], status="completed")
    drive(
        request,
        until=lambda r: node(r, "withdraw_observe").node_state == "COMPLETED",
        deliver=False,
    )
    return settled


def watch(request, seconds=2.0):
    """Let the deposit observer look for ``seconds``: it must not finish."""
    with contextlib.suppress(AssertionError):
        drive(
            request, until=lambda r: r.request_state == "COMPLETED", deliver=False, timeout=seconds
        )
    request.refresh_from_db()
    return request


def test_a_deposit_of_another_amount_is_not_matched(exchange, creator):
    request = create(creator, source="binance-sender", destination="upbit-receiver", amount="25")
    sent = broadcast(exchange, request, "binance", "sender")
    # Binance took its 1 USDT fee out of the 25 asked for: 24 travelled.
    assert Decimal(sent["sent"]) == Decimal("24")
    deposit = {"coin": "USDT", "network": "ETH", "txid": sent["txid"], "address": sent["address"]}

    exchange.credit_deposit("upbit", account="receiver", amount="25", **deposit)
    request = watch(request)

    observer = node(request, "deposit_observe")
    assert request.request_state == "EXECUTING", story(request)
    assert observer.node_state == "OBSERVING"
    assert observer.result["finding"] == "a deposit with this txid does not match the withdrawal"
    assert list(observer.result["mismatches"].values()) == [["amount"]]
    assert MovementAttention.objects.filter(request=request, node_key="deposit_observe").exists()

    exchange.credit_deposit("upbit", account="receiver", amount="24", **deposit)
    request = drive(request, deliver=False)
    assert request.request_state == "COMPLETED", story(request)
    assert node(request, "deposit_observe").result["deposit"]["amount"] == "24"


def test_a_deposit_to_another_address_is_not_matched(exchange, creator):
    # Upbit charges its fee on top: the 25 asked for travel whole. Binance reports the
    # address a deposit came to, so a deposit to another address can be told apart.
    request = create(creator, source="upbit-sender", destination="binance-receiver", amount="25")
    sent = broadcast(exchange, request, "upbit", "sender")
    assert Decimal(sent["sent"]) == Decimal("25")
    deposit = {"coin": "USDT", "network": "ETH", "txid": sent["txid"], "amount": "25"}

    exchange.credit_deposit("binance", account="receiver", address="0x" + "ee" * 20, **deposit)
    request = watch(request)

    observer = node(request, "deposit_observe")
    assert observer.node_state == "OBSERVING", story(request)
    assert list(observer.result["mismatches"].values()) == [["address"]]

    exchange.credit_deposit("binance", account="receiver", address=sent["address"], **deposit)
    request = drive(request, deliver=False)
    assert request.request_state == "COMPLETED", story(request)


def test_a_deposit_still_pending_at_the_exchange_is_not_yet_complete(exchange, creator):
    request = create(creator, source="binance-sender", destination="binance-receiver", amount="25")
    sent = broadcast(exchange, request, "binance", "sender")
    exchange.credit_deposit(
        "binance",
        account="receiver",
        coin="USDT",
        network="ETH",
        txid=sent["txid"],
        address=sent["address"],
        amount=sent["sent"],
        status="pending",
    )

    request = watch(request, seconds=1.0)
    assert node(request, "deposit_observe").node_state == "OBSERVING"

    exchange.complete_deposit("binance", sent["txid"])
    request = drive(request, deliver=False)
    assert request.request_state == "COMPLETED", story(request)

"""cctp_attestation_observe against the Iris stand-in and the devchains: it waits while Iris
has nothing or is pending, passes Iris's Retry-After on to the worker, and completes only on
an attestation for the burn that is canonical now and moves exactly the movement's amount."""

from decimal import Decimal

import pytest

from movements.executors.base import (
    DeterministicError,
    ExecutionContext,
    NodeSpec,
    ObservedStatus,
    TransientError,
    Upstream,
)
from standins.cctp import messages_sent
from venues.cctp.executors import CctpAttestationObserve

from .conftest import DOMAIN_B, IRIS_CONFIRMATIONS, USDC

pytestmark = [pytest.mark.devchain, pytest.mark.standin, pytest.mark.django_db]


def burn(cctp, chain_a, chain_b, amount):
    a, _ = cctp
    alice = chain_a.accounts[1]
    a.mint_usdc(alice.address, 100 * USDC)
    receipt = a.deposit_for_burn(alice, amount, DOMAIN_B, chain_b.accounts[2].address)
    return receipt["transactionHash"].to_0x_hex(), messages_sent(a.transmitter, receipt)[0]


def context(tx_hash, *, amount="12.345678", to=None, chain_b=None):
    destination = to or chain_b.accounts[2].address
    return ExecutionContext(
        request_id="r-1",
        node_id=2,
        node_key="attestation_observe",
        attempt=1,
        asset="USDC",
        amount=Decimal(amount),
        source="0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        destination=destination,
        config={"chain": "ethereum"},
        params={},
        upstream={"burn": Upstream("cctp_burn", "COMPLETED", tx_hash, {}, {})},
    )


AMOUNT = 12_345_678  # 12.345678 USDC


def test_pending_until_final_then_the_attested_message(chains_config, iris, cctp, chain_a, chain_b):
    tx_hash, raw = burn(cctp, chain_a, chain_b, AMOUNT)
    executor = CctpAttestationObserve()

    pending = executor.observe(context(tx_hash, chain_b=chain_b))
    assert pending.status == ObservedStatus.PENDING
    assert pending.detail["iris_status"] == "pending_confirmations"

    chain_a.mine(IRIS_CONFIRMATIONS)
    done = executor.observe(context(tx_hash, chain_b=chain_b))
    assert done.status == ObservedStatus.COMPLETED
    assert done.external_ref == tx_hash
    assert done.detail["message"] == "0x" + raw.hex()
    assert len(bytes.fromhex(done.detail["attestation"][2:])) == 65
    assert done.detail["burn_block_hash"]


def test_unknown_to_iris_is_pending_and_no_burn_yet_is_waiting(chains_config, iris, chain_b):
    executor = CctpAttestationObserve()
    observation = executor.observe(context("0x" + "ee" * 32, chain_b=chain_b))
    assert observation.status == ObservedStatus.PENDING
    assert observation.detail["iris_status"] == "not_found"
    assert executor.observe(context("", chain_b=chain_b)).detail == {"waiting_for": "burn"}


def test_iris_down_is_transient_with_its_retry_after(chains_config, iris, cctp, chain_a, chain_b):
    tx_hash, _ = burn(cctp, chain_a, chain_b, AMOUNT)
    iris.set_faults(status=503, retry_after=3)
    with pytest.raises(TransientError) as raised:
        CctpAttestationObserve().observe(context(tx_hash, chain_b=chain_b))
    assert raised.value.retry_after == 3


def test_an_attested_burn_that_a_reorg_removed_is_not_completed(
    chains_config, iris, cctp, chain_a, chain_b
):
    tx_hash, _ = burn(cctp, chain_a, chain_b, AMOUNT)
    iris.set_faults(confirmations=1)  # Iris attests at once, before our finality
    executor = CctpAttestationObserve()
    assert executor.observe(context(tx_hash, chain_b=chain_b)).status == ObservedStatus.COMPLETED
    chain_a.reorg(1)  # and then the burn's block is replaced: the burn is gone

    observation = executor.observe(context(tx_hash, chain_b=chain_b))

    assert observation.status == ObservedStatus.REORG
    assert observation.detail["iris_status"] == "complete"  # Iris still says so
    assert observation.detail["attention"]["reason"] == "reorg"


def test_an_attestation_for_another_amount_or_recipient_fails_with_the_finding(
    chains_config, iris, cctp, chain_a, chain_b
):
    tx_hash, _ = burn(cctp, chain_a, chain_b, AMOUNT)
    chain_a.mine(IRIS_CONFIRMATIONS)
    executor = CctpAttestationObserve()

    other_amount = executor.observe(context(tx_hash, amount="12.345679", chain_b=chain_b))
    assert other_amount.status == ObservedStatus.FAILED
    assert "12345678 units" in other_amount.detail["finding"]

    other_recipient = executor.observe(
        context(tx_hash, to=chain_b.accounts[5].address, chain_b=chain_b)
    )
    assert other_recipient.status == ObservedStatus.FAILED
    assert "recipient" in other_recipient.detail["finding"]


def test_amounts_finer_than_usdc_decimals_are_refused_at_create(chains_config):
    spec = NodeSpec(
        "attestation_observe", "USDC", Decimal("1.0000001"), "a", "b", {"chain": "ethereum"}, {}
    )
    with pytest.raises(DeterministicError, match="finer than 6 decimals"):
        CctpAttestationObserve().validate(spec)
    CctpAttestationObserve().validate(
        NodeSpec(
            "attestation_observe", "USDC", Decimal("1.000001"), "a", "b", {"chain": "ethereum"}, {}
        )
    )
    with pytest.raises(DeterministicError, match="no cctp configuration"):
        CctpAttestationObserve().validate(
            NodeSpec("attestation_observe", "USDC", Decimal("1"), "a", "b", {"chain": "solana"}, {})
        )

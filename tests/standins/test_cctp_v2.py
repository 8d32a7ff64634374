"""The CCTP V2 stand-in behaves like Circle's V2: a burn names maxFee and minFinalityThreshold,
the Iris stand-in fills in the nonce, the finality executed and the fee and signs (fast messages
at the source's `safe` block, standard ones at `finalized`), and the destination mints
amount - fee to the recipient and the fee to the fee recipient, once per nonce.

Driven through web3 and plain HTTP only (no QTG code)."""

import time
from decimal import Decimal

import httpx
import pytest
from web3.exceptions import ContractLogicError, TransactionNotFound
from web3.logs import DISCARD

from standins.cctp import address_to_bytes32, bytes32_to_address, sign_attestation
from standins.cctp_v2 import (
    BURN_MESSAGE_VERSION_V2,
    FINALITY_THRESHOLD_CONFIRMED,
    FINALITY_THRESHOLD_FINALIZED,
    MESSAGE_VERSION_V2,
    BurnMessageV2,
    MessageV2,
)
from standins.contracts import transact
from standins.iris import IrisService, SourceDomain
from standins.iris_v2 import FeeSchedule, RateLimit

from .conftest import ATTESTER_KEY, DOMAIN_A, DOMAIN_B

pytestmark = pytest.mark.devchain

USDC = 10**6
ZERO32 = b"\0" * 32


@pytest.fixture
def iris(chain_a, chain_b, cctp, cctp_v2):
    """The Iris stand-in watching both chains' V1 and V2 transmitters (fast fee 1 bps)."""
    (a, b), (a2, b2) = cctp, cctp_v2
    domains = {
        DOMAIN_A: SourceDomain(chain_a.url, a.transmitter.address, a2.transmitter.address),
        DOMAIN_B: SourceDomain(chain_b.url, b.transmitter.address, b2.transmitter.address),
    }
    fees = FeeSchedule(fast_bps=Decimal("1"), standard_bps=Decimal("0"))
    with IrisService(domains, attester_key=ATTESTER_KEY, fees=fees) as service:
        yield service


def get_messages(iris, tx_hash, domain=DOMAIN_A):
    response = httpx.get(
        f"{iris.url}/v2/messages/{domain}", params={"transactionHash": tx_hash}, timeout=10
    )
    return response.status_code, response.json()


def mine_until(chain, tag, block):
    """Mine until the chain's `tag` block (safe / finalized) has reached `block`."""
    for _ in range(300):
        if chain.block_number(tag) >= block:
            return
        chain.mine(1)
    raise AssertionError(f"{tag} never reached block {block}")


def burn(cctp, cctp_v2, chain_a, chain_b, amount, *, max_fee, threshold):
    (a, _), (a2, _) = cctp, cctp_v2
    alice, bob = chain_a.accounts[1], chain_b.accounts[2]
    a.mint_usdc(alice.address, 100 * USDC)
    receipt = a2.deposit_for_burn(
        alice, amount, DOMAIN_B, bob.address, max_fee=max_fee, min_finality_threshold=threshold
    )
    return receipt, "0x" + bytes(receipt["transactionHash"]).hex()


def test_fast_burn_is_attested_at_safe_and_minted_minus_the_fee(
    cctp, cctp_v2, chain_a, chain_b, iris
):
    (_, _), (a2, b2) = cctp, cctp_v2
    alice, bob, relayer = chain_a.accounts[1], chain_b.accounts[2], chain_b.accounts[3]
    fee_recipient = chain_b.accounts[5].address
    amount, max_fee = 10 * USDC, 5_000
    fee = 1_000  # 1 bps of 10 USDC

    receipt, tx_hash = burn(
        cctp, cctp_v2, chain_a, chain_b, amount, max_fee=max_fee, threshold=1000
    )

    # as emitted: Circle's V2 layout, nonce / finality executed / fee / expiration left zero
    (event,) = a2.messenger.events.DepositForBurn().process_receipt(receipt, errors=DISCARD)
    assert event["args"]["maxFee"] == max_fee
    assert event["args"]["minFinalityThreshold"] == 1000
    assert event["args"]["amount"] == amount
    (sent,) = a2.transmitter.events.MessageSent().process_receipt(receipt, errors=DISCARD)
    emitted = bytes(sent["args"]["message"])
    message = MessageV2.parse(emitted)
    assert message.encode() == emitted
    assert (message.version, message.source_domain, message.destination_domain) == (
        MESSAGE_VERSION_V2,
        DOMAIN_A,
        DOMAIN_B,
    )
    assert message.nonce == ZERO32 and message.finality_threshold_executed == 0
    assert message.min_finality_threshold == 1000
    assert bytes32_to_address(message.sender) == a2.messenger.address
    assert bytes32_to_address(message.recipient) == b2.messenger.address
    assert emitted[140:144] == (1000).to_bytes(4, "big")  # Circle's offsets
    assert message.burn == BurnMessageV2(
        BURN_MESSAGE_VERSION_V2,
        address_to_bytes32(a2.usdc.address),
        address_to_bytes32(bob.address),
        amount,
        address_to_bytes32(alice.address),
        max_fee,
        0,
        0,
        b"",
    )
    assert emitted[148 + 132 : 148 + 164] == max_fee.to_bytes(32, "big")

    # not yet at the source's safe block: pending
    block = receipt["blockNumber"]
    assert chain_a.block_number("safe") < block
    status, body = get_messages(iris, tx_hash)
    assert status == 200
    (entry,) = body["messages"]
    assert entry["status"] == "pending_confirmations"
    assert entry["attestation"] == "PENDING"
    assert entry["cctpVersion"] == 2

    mine_until(chain_a, "safe", block)
    assert chain_a.block_number("finalized") < block  # fast: before finality
    status, body = get_messages(iris, tx_hash)
    (entry,) = body["messages"]
    assert entry["status"] == "complete"
    signed = bytes.fromhex(entry["message"][2:])
    attested = MessageV2.parse(signed)
    assert attested.nonce != ZERO32
    assert entry["eventNonce"] == "0x" + attested.nonce.hex()
    assert attested.finality_threshold_executed == FINALITY_THRESHOLD_CONFIRMED
    assert attested.burn.fee_executed == fee
    assert (
        attested.with_(nonce=ZERO32, finality_threshold_executed=0, body=message.body).encode()
        == emitted
    )  # only the attester's fields differ
    decoded = entry["decodedMessage"]
    assert decoded["finalityThresholdExecuted"] == "1000"
    assert decoded["minFinalityThreshold"] == "1000"
    assert decoded["decodedMessageBody"]["feeExecuted"] == str(fee)
    assert decoded["decodedMessageBody"]["maxFee"] == str(max_fee)
    assert decoded["decodedMessageBody"]["amount"] == str(amount)
    assert decoded["decodedMessageBody"]["mintRecipient"] == bob.address
    attestation = bytes.fromhex(entry["attestation"][2:])
    assert attestation == sign_attestation(signed, ATTESTER_KEY)

    bob_before, fees_before = b2.usdc_balance(bob.address), b2.usdc_balance(fee_recipient)
    assert not b2.is_nonce_used(attested.nonce)
    minted = b2.receive_message(relayer, signed, attestation)

    assert b2.usdc_balance(bob.address) == bob_before + amount - fee
    assert b2.usdc_balance(fee_recipient) == fees_before + fee
    assert b2.is_nonce_used(attested.nonce)
    (mint,) = b2.messenger.events.MintAndWithdraw().process_receipt(minted, errors=DISCARD)
    assert (mint["args"]["amount"], mint["args"]["feeCollected"]) == (amount - fee, fee)
    (received,) = b2.transmitter.events.MessageReceived().process_receipt(minted, errors=DISCARD)
    assert received["args"]["nonce"] == attested.nonce
    assert received["args"]["finalityThresholdExecuted"] == 1000

    # the same message again: refused, nothing minted
    with pytest.raises(ContractLogicError, match="Nonce already used"):
        b2.receive_message(relayer, signed, attestation)
    assert b2.usdc_balance(bob.address) == bob_before + amount - fee


def test_standard_burn_is_attested_at_finalized_and_minted_in_full(
    cctp, cctp_v2, chain_a, chain_b, iris
):
    _, (_, b2) = cctp, cctp_v2
    bob, relayer = chain_b.accounts[2], chain_b.accounts[3]
    fee_recipient = chain_b.accounts[5].address
    amount = 7_654_321
    receipt, tx_hash = burn(cctp, cctp_v2, chain_a, chain_b, amount, max_fee=0, threshold=2000)
    block = receipt["blockNumber"]

    mine_until(chain_a, "safe", block)
    assert chain_a.block_number("finalized") < block
    _, body = get_messages(iris, tx_hash)
    assert body["messages"][0]["status"] == "pending_confirmations"  # safe is not enough

    mine_until(chain_a, "finalized", block)
    _, body = get_messages(iris, tx_hash)
    (entry,) = body["messages"]
    assert entry["status"] == "complete"
    signed = bytes.fromhex(entry["message"][2:])
    attested = MessageV2.parse(signed)
    assert attested.finality_threshold_executed == FINALITY_THRESHOLD_FINALIZED
    assert attested.burn.fee_executed == 0

    bob_before, fees_before = b2.usdc_balance(bob.address), b2.usdc_balance(fee_recipient)
    b2.receive_message(relayer, signed, bytes.fromhex(entry["attestation"][2:]))
    assert b2.usdc_balance(bob.address) == bob_before + amount
    assert b2.usdc_balance(fee_recipient) == fees_before


def test_a_fee_above_max_fee_is_not_minted(cctp, cctp_v2, chain_a, chain_b, iris):
    _, (_, b2) = cctp, cctp_v2
    bob, relayer = chain_b.accounts[2], chain_b.accounts[3]
    amount, max_fee = 10 * USDC, 2_000
    receipt, tx_hash = burn(
        cctp, cctp_v2, chain_a, chain_b, amount, max_fee=max_fee, threshold=1000
    )
    mine_until(chain_a, "safe", receipt["blockNumber"])
    _, body = get_messages(iris, tx_hash)
    signed = MessageV2.parse(bytes.fromhex(body["messages"][0]["message"][2:]))
    bob_before = b2.usdc_balance(bob.address)

    for fee, reason in ((max_fee + 1, "Fee exceeds max fee"), (amount, "Fee equals or exceeds")):
        forged = signed.with_(
            body=BurnMessageV2(**{**signed.burn.__dict__, "fee_executed": fee}).encode()
        ).encode()
        with pytest.raises(ContractLogicError, match=reason):
            b2.receive_message(relayer, forged, sign_attestation(forged, ATTESTER_KEY))
    assert b2.usdc_balance(bob.address) == bob_before
    assert not b2.is_nonce_used(signed.nonce)


def test_fast_burn_whose_max_fee_is_below_the_fast_fee_waits_for_finality(
    cctp, cctp_v2, chain_a, chain_b, iris
):
    amount = 10 * USDC  # fast fee 1_000
    receipt, tx_hash = burn(cctp, cctp_v2, chain_a, chain_b, amount, max_fee=999, threshold=1000)
    block = receipt["blockNumber"]
    mine_until(chain_a, "safe", block)
    _, body = get_messages(iris, tx_hash)
    (entry,) = body["messages"]
    assert entry["status"] == "pending_confirmations"
    assert entry["delayReason"] == "insufficient_fee"

    mine_until(chain_a, "finalized", block)
    _, body = get_messages(iris, tx_hash)
    attested = MessageV2.parse(bytes.fromhex(body["messages"][0]["message"][2:]))
    assert attested.finality_threshold_executed == FINALITY_THRESHOLD_FINALIZED
    assert attested.burn.fee_executed == 0  # the standard fee


def test_reattest_upgrades_a_fast_message_to_finalized_with_the_same_nonce_and_fee(
    cctp, cctp_v2, chain_a, chain_b, iris
):
    _, (_, b2) = cctp, cctp_v2
    bob, relayer = chain_b.accounts[2], chain_b.accounts[3]
    receipt, tx_hash = burn(
        cctp, cctp_v2, chain_a, chain_b, 10 * USDC, max_fee=5_000, threshold=1000
    )
    block = receipt["blockNumber"]
    mine_until(chain_a, "safe", block)
    _, body = get_messages(iris, tx_hash)
    fast = MessageV2.parse(bytes.fromhex(body["messages"][0]["message"][2:]))
    nonce = "0x" + fast.nonce.hex()

    unknown = httpx.post(f"{iris.url}/v2/reattest/0x{'11' * 32}", timeout=10)
    assert unknown.status_code == 404
    response = httpx.post(f"{iris.url}/v2/reattest/{nonce}", timeout=10)
    assert response.status_code == 200
    assert response.json() == {
        "message": "Re-attestation successfully requested for nonce.",
        "nonce": nonce,
    }
    _, body = get_messages(iris, tx_hash)  # not final yet: still the fast attestation
    assert MessageV2.parse(bytes.fromhex(body["messages"][0]["message"][2:])) == fast

    mine_until(chain_a, "finalized", block)
    by_nonce = httpx.get(f"{iris.url}/v2/messages/{DOMAIN_A}", params={"nonce": nonce}, timeout=10)
    (entry,) = by_nonce.json()["messages"]
    final = MessageV2.parse(bytes.fromhex(entry["message"][2:]))
    assert final.finality_threshold_executed == FINALITY_THRESHOLD_FINALIZED
    assert (final.nonce, final.burn.fee_executed) == (fast.nonce, 1_000)

    bob_before = b2.usdc_balance(bob.address)
    b2.receive_message(relayer, final.encode(), bytes.fromhex(entry["attestation"][2:]))
    assert b2.usdc_balance(bob.address) == bob_before + 10 * USDC - 1_000
    # the fast copy of the same transfer can no longer mint: one nonce, one mint
    fast_raw = fast.encode()
    with pytest.raises(ContractLogicError, match="Nonce already used"):
        b2.receive_message(relayer, fast_raw, sign_attestation(fast_raw, ATTESTER_KEY))


def test_burn_limit_per_message_and_max_fee_checked_at_burn(cctp, cctp_v2, chain_a, chain_b):
    (a, _), (a2, _) = cctp, cctp_v2
    alice, bob = chain_a.accounts[1], chain_b.accounts[2]
    a.mint_usdc(alice.address, 100 * USDC)
    a2.set_burn_limit(5 * USDC)
    assert a2.messenger.functions.burnLimitsPerMessage(a2.usdc.address).call() == 5 * USDC
    assert a2.messenger.functions.localMinter().call() == a2.messenger.address
    with pytest.raises(ContractLogicError, match="Burn amount exceeds per tx limit"):
        a2.deposit_for_burn(
            alice, 5 * USDC + 1, DOMAIN_B, bob.address, max_fee=0, min_finality_threshold=2000
        )
    with pytest.raises(ContractLogicError, match="Max fee must be less than amount"):
        a2.deposit_for_burn(
            alice, USDC, DOMAIN_B, bob.address, max_fee=USDC, min_finality_threshold=1000
        )
    transact(chain_a.web3, a2.owner, a2.messenger.functions.setMinFee(1_000))  # 0.01 %
    with pytest.raises(ContractLogicError, match="Insufficient max fee"):
        a2.deposit_for_burn(
            alice, USDC, DOMAIN_B, bob.address, max_fee=99, min_finality_threshold=1000
        )


def test_fees_endpoint_answers_fast_and_standard_minimum_fees(iris):
    response = httpx.get(f"{iris.url}/v2/burn/USDC/fees/{DOMAIN_A}/{DOMAIN_B}", timeout=10)
    assert response.status_code == 200
    assert response.json() == [
        {"finalityThreshold": 1000, "minimumFee": 1},
        {"finalityThreshold": 2000, "minimumFee": 0},
    ]
    assert httpx.get(f"{iris.url}/v2/burn/USDC/fees/99/{DOMAIN_B}").status_code == 400


def test_rate_limit_answers_429_and_blocks_the_caller(chain_a, cctp, cctp_v2):
    assert RateLimit() == RateLimit(requests=35, per_seconds=1.0, block_seconds=300.0)
    (a, _), (a2, _) = cctp, cctp_v2
    domains = {DOMAIN_A: SourceDomain(chain_a.url, a.transmitter.address, a2.transmitter.address)}
    limit = RateLimit(requests=35, per_seconds=1.0, block_seconds=3.0)
    with IrisService(domains, attester_key=ATTESTER_KEY, rate_limit=limit) as iris:
        path = f"{iris.url}/v2/burn/USDC/fees/{DOMAIN_A}/{DOMAIN_B}"
        with httpx.Client(timeout=10) as client:
            started = time.monotonic()
            statuses = [client.get(path).status_code for _ in range(36)]
            assert time.monotonic() - started < 1.0, "too slow to test a 35/s limit"
            assert statuses == [200] * 35 + [429]
            blocked = client.get(path)
            assert blocked.status_code == 429
            assert 1 <= int(blocked.headers["Retry-After"]) <= 3
            time.sleep(1.2)  # the 1 s window has passed, the block has not
            assert client.get(path).status_code == 429
            assert client.post(f"{iris.url}/v2/reattest/0x{'11' * 32}").status_code == 429
            assert client.get(f"{iris.url}/control/health").status_code == 200  # not limited
            time.sleep(3.0 - 1.2 + 0.2)
            assert client.get(path).status_code == 200


def test_an_expired_message_is_refused_until_reattested(cctp, cctp_v2, chain_a, chain_b):
    (a, b), (a2, b2) = cctp, cctp_v2
    bob, relayer = chain_b.accounts[2], chain_b.accounts[3]
    domains = {
        DOMAIN_A: SourceDomain(chain_a.url, a.transmitter.address, a2.transmitter.address),
        DOMAIN_B: SourceDomain(chain_b.url, b.transmitter.address, b2.transmitter.address),
    }
    with IrisService(domains, attester_key=ATTESTER_KEY, expiration_blocks=3) as iris:
        receipt, tx_hash = burn(
            cctp, cctp_v2, chain_a, chain_b, 10 * USDC, max_fee=5_000, threshold=1000
        )
        mine_until(chain_a, "safe", receipt["blockNumber"])
        head_b = chain_b.block_number()
        _, body = get_messages(iris, tx_hash)
        (entry,) = body["messages"]
        signed = MessageV2.parse(bytes.fromhex(entry["message"][2:]))
        assert signed.burn.expiration_block == head_b + 3
        chain_b.mine(3)
        with pytest.raises(ContractLogicError, match="Message expired and must be re-signed"):
            b2.receive_message(relayer, signed.encode(), bytes.fromhex(entry["attestation"][2:]))

        mine_until(chain_a, "finalized", receipt["blockNumber"])
        nonce = "0x" + signed.nonce.hex()
        assert httpx.post(f"{iris.url}/v2/reattest/{nonce}", timeout=10).status_code == 200
        _, body = get_messages(iris, tx_hash)
        (entry,) = body["messages"]
        fresh = MessageV2.parse(bytes.fromhex(entry["message"][2:]))
        assert fresh.burn.expiration_block == chain_b.block_number() + 3
        assert (fresh.nonce, fresh.burn.fee_executed) == (signed.nonce, 1_000)
        bob_before = b2.usdc_balance(bob.address)
        b2.receive_message(relayer, fresh.encode(), bytes.fromhex(entry["attestation"][2:]))
        assert b2.usdc_balance(bob.address) == bob_before + 10 * USDC - 1_000


def test_a_fast_attestation_outlives_a_reorg_that_removes_the_burn(
    cctp, cctp_v2, chain_a, chain_b, iris
):
    """Circle's hazard, kept: a fast message is signed before finality, so a reorg can remove
    the burn after the attestation is out. The stand-in keeps answering it (as Iris does); a
    client must check the source chain before it mints."""
    receipt, tx_hash = burn(
        cctp, cctp_v2, chain_a, chain_b, 10 * USDC, max_fee=5_000, threshold=1000
    )
    block = receipt["blockNumber"]
    mine_until(chain_a, "safe", block)
    _, body = get_messages(iris, tx_hash)
    (attested,) = body["messages"]
    assert attested["status"] == "complete"

    chain_a.reorg(chain_a.block_number() - block + 1, [])
    with pytest.raises(TransactionNotFound):
        chain_a.web3.eth.get_transaction_receipt(tx_hash)  # the burn is gone
    status, body = get_messages(iris, tx_hash)
    assert status == 200
    assert body["messages"][0]["message"] == attested["message"]


def test_a_slow_attester_signs_a_fast_burn_only_after_the_confirmations_fault(
    cctp, cctp_v2, chain_a, chain_b, iris
):
    receipt, tx_hash = burn(
        cctp, cctp_v2, chain_a, chain_b, 10 * USDC, max_fee=5_000, threshold=1000
    )
    mine_until(chain_a, "safe", receipt["blockNumber"])  # Circle's attester would sign now
    confirmations = chain_a.block_number() - receipt["blockNumber"] + 1
    iris.set_faults(confirmations=confirmations + 5)

    _, body = get_messages(iris, tx_hash)
    assert body["messages"][0]["status"] == "pending_confirmations"
    chain_a.mine(5)
    _, body = get_messages(iris, tx_hash)
    assert body["messages"][0]["status"] == "complete"

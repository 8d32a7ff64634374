"""The CCTP stand-in behaves like Circle's v1 contracts: a burn on chain A emits a message, the
attester's signature lets chain B mint exactly that amount once, and nothing else mints."""

import pytest
from eth_account import Account
from web3.exceptions import ContractLogicError
from web3.logs import DISCARD

from standins.cctp import (
    BURN_MESSAGE_VERSION,
    MESSAGE_VERSION,
    BurnMessage,
    Message,
    address_to_bytes32,
    bytes32_to_address,
    messages_sent,
    sign_attestation,
)
from standins.contracts import transact

from .conftest import ATTESTER_KEY, DOMAIN_A, DOMAIN_B

pytestmark = pytest.mark.devchain

USDC = 10**6  # 6 decimals


def burn_on_a(cctp, chain_a, chain_b, amount):
    """Alice (chain A) burns `amount` for Bob on chain B; returns (receipt, raw message)."""
    a, _ = cctp
    alice = chain_a.accounts[1]
    bob = chain_b.accounts[2]
    a.mint_usdc(alice.address, 100 * USDC)
    receipt = a.deposit_for_burn(alice, amount, DOMAIN_B, bob.address)
    (message,) = messages_sent(a.transmitter, receipt)
    return receipt, message


def test_burn_on_a_then_attested_receive_on_b_mints_exactly_the_amount(
    cctp, chain_a, chain_b, attester
):
    a, b = cctp
    alice, bob, relayer = chain_a.accounts[1], chain_b.accounts[2], chain_b.accounts[3]
    amount = 25_500_001  # 25.500001 USDC
    supply_a = a.usdc.functions.totalSupply().call()

    receipt, raw = burn_on_a(cctp, chain_a, chain_b, amount)

    assert a.usdc_balance(alice.address) == 100 * USDC - amount
    assert a.usdc.functions.totalSupply().call() == supply_a + 100 * USDC - amount  # burned
    assert a.usdc_balance(a.messenger.address) == 0
    (deposit,) = a.messenger.events.DepositForBurn().process_receipt(receipt, errors=DISCARD)
    message = Message.parse(raw)
    assert message.encode() == raw
    assert (message.version, message.source_domain, message.destination_domain) == (
        MESSAGE_VERSION,
        DOMAIN_A,
        DOMAIN_B,
    )
    assert message.nonce == deposit["args"]["nonce"]
    assert bytes32_to_address(message.sender) == a.messenger.address
    assert bytes32_to_address(message.recipient) == b.messenger.address
    assert message.destination_caller == b"\0" * 32
    assert message.burn == BurnMessage(
        BURN_MESSAGE_VERSION,
        address_to_bytes32(a.usdc.address),
        address_to_bytes32(bob.address),
        amount,
        address_to_bytes32(alice.address),
    )
    assert message.burn.encode() == message.body

    attestation = sign_attestation(raw, attester.key)
    assert len(attestation) == 65
    bob_before = b.usdc_balance(bob.address)
    assert not b.is_nonce_used(DOMAIN_A, message.nonce)

    minted = b.receive_message(relayer, raw, attestation)

    assert b.usdc_balance(bob.address) == bob_before + amount
    assert b.usdc_balance(relayer.address) == 0
    assert b.is_nonce_used(DOMAIN_A, message.nonce)
    (mint,) = b.messenger.events.MintAndWithdraw().process_receipt(minted, errors=DISCARD)
    assert mint["args"] == {
        "mintRecipient": bob.address,
        "amount": amount,
        "mintToken": b.usdc.address,
    }
    (received,) = b.transmitter.events.MessageReceived().process_receipt(minted, errors=DISCARD)
    assert received["args"]["nonce"] == message.nonce
    assert received["args"]["sourceDomain"] == DOMAIN_A


def test_each_burn_takes_the_next_nonce(cctp, chain_a, chain_b):
    a, _ = cctp
    first = Message.parse(burn_on_a(cctp, chain_a, chain_b, 1 * USDC)[1])
    second = Message.parse(burn_on_a(cctp, chain_a, chain_b, 2 * USDC)[1])
    assert second.nonce == first.nonce + 1
    assert a.transmitter.functions.nextAvailableNonce().call() == second.nonce + 1


def test_a_message_mints_only_once(cctp, chain_a, chain_b, attester):
    _, b = cctp
    bob, relayer = chain_b.accounts[2], chain_b.accounts[3]
    _, raw = burn_on_a(cctp, chain_a, chain_b, 10 * USDC)
    attestation = sign_attestation(raw, attester.key)
    b.receive_message(relayer, raw, attestation)
    balance = b.usdc_balance(bob.address)

    with pytest.raises(ContractLogicError, match="Nonce already used"):
        b.receive_message(relayer, raw, attestation)
    # Sent regardless (a retry after a lost response): mined, reverted, nothing minted.
    retry = b.receive_message(relayer, raw, attestation, gas=300_000, check=False)
    assert retry["status"] == 0
    assert b.usdc_balance(bob.address) == balance


def test_a_forged_attestation_mints_nothing(cctp, chain_a, chain_b, attester):
    _, b = cctp
    bob, relayer = chain_b.accounts[2], chain_b.accounts[3]
    _, raw = burn_on_a(cctp, chain_a, chain_b, 10 * USDC)
    message = Message.parse(raw)
    genuine = sign_attestation(raw, attester.key)
    balance = b.usdc_balance(bob.address)

    tampered = bytearray(genuine)
    tampered[10] ^= 0x01  # a flipped bit in r
    impostor = sign_attestation(raw, Account.create().key)
    inflated = Message.parse(raw).burn
    inflated = BurnMessage(
        inflated.version,
        inflated.burn_token,
        inflated.mint_recipient,
        inflated.amount * 100,
        inflated.message_sender,
    )
    raised_raw = Message(**{**message.__dict__, "body": inflated.encode()}).encode()

    with pytest.raises(ContractLogicError, match="signature"):  # recovers garbage or nothing
        b.receive_message(relayer, raw, bytes(tampered))
    with pytest.raises(ContractLogicError, match="Invalid signature: not attester"):
        b.receive_message(relayer, raw, impostor)  # signed by someone else
    with pytest.raises(ContractLogicError, match="Invalid signature: not attester"):
        b.receive_message(relayer, raised_raw, genuine)  # message changed after signing
    with pytest.raises(ContractLogicError, match="Invalid attestation length"):
        b.receive_message(relayer, raw, genuine[:64])
    assert b.usdc_balance(bob.address) == balance
    assert not b.is_nonce_used(DOMAIN_A, message.nonce)

    # The genuine attestation still works: the refusals used nothing up.
    b.receive_message(relayer, raw, genuine)
    assert b.usdc_balance(bob.address) == balance + 10 * USDC


def test_a_message_for_another_domain_is_refused(cctp, chain_a, chain_b, attester):
    a, _ = cctp
    _, raw = burn_on_a(cctp, chain_a, chain_b, 1 * USDC)
    with pytest.raises(ContractLogicError, match="Invalid destination domain"):
        a.receive_message(chain_a.accounts[3], raw, sign_attestation(raw, attester.key))


def test_rotating_the_attester_refuses_the_old_one(cctp, chain_a, chain_b, attester):
    _, b = cctp
    _, raw = burn_on_a(cctp, chain_a, chain_b, 1 * USDC)
    new_attester = Account.create()
    transact(b.w3, b.owner, b.transmitter.functions.setAttester(new_attester.address))
    with pytest.raises(ContractLogicError, match="Invalid signature: not attester"):
        b.receive_message(chain_b.accounts[3], raw, sign_attestation(raw, ATTESTER_KEY))
    b.receive_message(chain_b.accounts[3], raw, sign_attestation(raw, new_attester.key))


def test_only_the_owner_configures(cctp, chain_b):
    _, b = cctp
    stranger = chain_b.accounts[5]
    with pytest.raises(ContractLogicError, match="caller is not the owner"):
        b.transmitter.functions.setAttester(stranger.address).estimate_gas(
            {"from": stranger.address}
        )
    with pytest.raises(ContractLogicError, match="caller is not a minter"):
        b.usdc.functions.mint(stranger.address, 1).estimate_gas({"from": stranger.address})
    with pytest.raises(ContractLogicError, match="Invalid message transmitter"):
        b.messenger.functions.handleReceiveMessage(DOMAIN_A, b"\0" * 32, b"").estimate_gas(
            {"from": stranger.address}
        )


def test_the_burn_limit_per_message_has_circles_shape_and_is_enforced(cctp, chain_a, chain_b):
    a, _ = cctp
    minter = a.w3.eth.contract(
        address=a.messenger.functions.localMinter().call(), abi=a.messenger.abi
    )
    assert minter.functions.burnLimitsPerMessage(a.usdc.address).call() == 2**256 - 1
    a.set_burn_limit(5 * USDC)
    try:
        assert minter.functions.burnLimitsPerMessage(a.usdc.address).call() == 5 * USDC
        with pytest.raises(ContractLogicError, match="Burn amount exceeds per tx limit"):
            burn_on_a(cctp, chain_a, chain_b, 5 * USDC + 1)
        receipt, _ = burn_on_a(cctp, chain_a, chain_b, 5 * USDC)
        assert receipt["status"] == 1
    finally:
        a.set_burn_limit(2**256 - 1)

"""The Iris stand-in answers like Circle's v2 API from what the devchain shows, and its
attestations are the ones the destination chain's MessageTransmitter accepts (or, tampered,
refuses)."""

import httpx
import pytest
from web3.exceptions import ContractLogicError

from standins.cctp import messages_sent

from .conftest import DOMAIN_A, DOMAIN_B, IRIS_CONFIRMATIONS, USDC

pytestmark = [pytest.mark.devchain, pytest.mark.standin]


def burn(cctp, chain_a, chain_b, amount=5 * USDC):
    a, _ = cctp
    alice, bob = chain_a.accounts[1], chain_b.accounts[2]
    a.mint_usdc(alice.address, 100 * USDC)
    receipt = a.deposit_for_burn(alice, amount, DOMAIN_B, bob.address)
    return receipt["transactionHash"].to_0x_hex(), messages_sent(a.transmitter, receipt)[0]


def ask(iris, tx_hash, domain=DOMAIN_A):
    return httpx.get(f"{iris.url}/v2/messages/{domain}", params={"transactionHash": tx_hash})


def test_unknown_then_pending_then_complete_with_an_attestation_the_chain_accepts(
    iris, cctp, chain_a, chain_b
):
    _, b = cctp
    assert ask(iris, "0x" + "ab" * 32).status_code == 404

    tx_hash, raw = burn(cctp, chain_a, chain_b)
    for _ in range(IRIS_CONFIRMATIONS - 1):
        (pending,) = ask(iris, tx_hash).json()["messages"]
        assert pending["status"] == "pending_confirmations"
        assert pending["attestation"] == "PENDING"
        assert pending["message"] == "0x"
        chain_a.mine()

    (done,) = ask(iris, tx_hash).json()["messages"]
    assert done["status"] == "complete"
    assert done["cctpVersion"] == 1
    assert bytes.fromhex(done["message"][2:]) == raw
    decoded = done["decodedMessage"]
    assert (decoded["sourceDomain"], decoded["destinationDomain"]) == ("0", "3")
    assert decoded["decodedMessageBody"]["amount"] == str(5 * USDC)
    assert decoded["decodedMessageBody"]["mintRecipient"] == chain_b.accounts[2].address
    assert done["eventNonce"] == decoded["nonce"]

    bob = chain_b.accounts[2].address
    before = b.usdc_balance(bob)
    b.receive_message(chain_b.accounts[3], raw, bytes.fromhex(done["attestation"][2:]))
    assert b.usdc_balance(bob) == before + 5 * USDC


def test_a_failed_or_foreign_transaction_has_no_message(iris, cctp, chain_a):
    a, _ = cctp
    plain = a.mint_usdc(chain_a.accounts[1].address, USDC)  # a transaction without MessageSent
    assert ask(iris, plain["transactionHash"].to_0x_hex()).status_code == 404
    assert ask(iris, "0x1234").status_code == 400
    assert ask(iris, "0x" + "ab" * 32, domain=7).status_code == 400


def test_faults_5xx_then_429_with_retry_after_then_back(iris, cctp, chain_a, chain_b):
    tx_hash, _ = burn(cctp, chain_a, chain_b)
    httpx.post(f"{iris.url}/control/faults", json={"status": 503, "times": 2}).raise_for_status()
    assert [ask(iris, tx_hash).status_code for _ in range(3)] == [503, 503, 200]

    iris.set_faults(rate_limit=True, retry_after=7, times=1)
    limited = ask(iris, tx_hash)
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "7"
    assert ask(iris, tx_hash).status_code == 200
    mine = [s.status for s in iris.served() if tx_hash in s.path]
    assert mine == [503, 503, 200, 429, 200]


def test_a_slow_answer_takes_its_delay(iris, cctp, chain_a, chain_b):
    tx_hash, _ = burn(cctp, chain_a, chain_b)
    iris.set_faults(delay=0.5, times=1)
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(f"{iris.url}/v2/messages/0", params={"transactionHash": tx_hash}, timeout=0.2)
    assert ask(iris, tx_hash).status_code == 200


def test_a_tampered_attestation_is_refused_by_the_destination_chain(iris, cctp, chain_a, chain_b):
    _, b = cctp
    tx_hash, raw = burn(cctp, chain_a, chain_b)
    chain_a.mine(IRIS_CONFIRMATIONS)
    iris.set_faults(tamper=True)
    (done,) = ask(iris, tx_hash).json()["messages"]
    assert done["status"] == "complete"
    with pytest.raises(ContractLogicError, match="Invalid signature: not attester"):
        b.receive_message(chain_b.accounts[3], raw, bytes.fromhex(done["attestation"][2:]))


def test_an_attestation_outlives_a_reorg_deeper_than_its_confirmations(
    iris, cctp, chain_a, chain_b
):
    """What the real service does too: the client, not Iris, must notice the burn is gone."""
    tx_hash, raw = burn(cctp, chain_a, chain_b)
    iris.set_faults(confirmations=1)
    (done,) = ask(iris, tx_hash).json()["messages"]
    assert done["status"] == "complete"

    chain_a.reorg(1)  # the burn's block is replaced, the burn is gone
    # approve (nonce 0) stays, depositForBurn (nonce 1) is gone
    assert chain_a.web3.eth.get_transaction_count(chain_a.accounts[1].address) == 1
    (still,) = ask(iris, tx_hash).json()["messages"]
    assert still["status"] == "complete"
    assert bytes.fromhex(still["message"][2:]) == raw

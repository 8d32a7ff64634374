"""The anvil devchain and the test ERC-20 behave like a real chain where QTG's executors care:
exact token amounts, readable reverts, pending/replaced/dropped transactions, reorgs."""

import json
import shutil
import time
from decimal import Decimal

import pytest
from web3 import Web3
from web3.exceptions import ContractLogicError, TransactionNotFound, Web3RPCError

from standins.anvil import Anvil, dev_accounts, find_anvil
from standins.contracts import (
    BUILD_FILE,
    TransactionFailed,
    build_is_fresh,
    load_artifacts,
    replay_revert_reason,
    transact,
)

from .conftest import CHAIN_A_ID, CHAIN_B_ID

pytestmark = pytest.mark.devchain

GWEI = 10**9


def signed_transfer(chain, sender, to, *, nonce, value=1, tip=GWEI, max_fee=20 * GWEI):
    """A signed EIP-1559 ETH transfer (raw bytes), not yet sent."""
    tx = {
        "type": 2,
        "chainId": chain.chain_id,
        "nonce": nonce,
        "to": to,
        "value": value,
        "gas": 21_000,
        "maxPriorityFeePerGas": tip,
        "maxFeePerGas": max_fee,
    }
    return sender.signer.sign_transaction(tx)


def receipt_or_none(w3, tx_hash):
    try:
        return w3.eth.get_transaction_receipt(tx_hash)
    except TransactionNotFound:
        return None


def test_two_chains_with_their_ids_and_funded_dev_accounts(chain_a, chain_b):
    assert chain_a.web3.eth.chain_id == CHAIN_A_ID
    assert chain_b.web3.eth.chain_id == CHAIN_B_ID
    assert chain_a.url != chain_b.url
    # Our derivation of the well-known mnemonic is anvil's.
    assert [a.address for a in chain_a.accounts] == chain_a.web3.eth.accounts
    assert chain_a.web3.eth.get_balance(chain_a.accounts[9].address) == Web3.to_wei(10_000, "ether")


@pytest.mark.parametrize(
    ("decimals", "amount"),
    [
        (6, Decimal("1234.567891")),
        (18, Decimal("0.000000000000000001")),
        (18, Decimal("987654.123456789012345678")),
    ],
)
def test_erc20_transfer_moves_the_exact_amount(chain_a, token6, token18, decimals, amount):
    token = {6: token6, 18: token18}[decimals]
    w3 = chain_a.web3
    owner, alice, bob = chain_a.accounts[:3]
    units = int(amount.scaleb(decimals))
    assert Decimal(units).scaleb(-decimals) == amount
    assert token.functions.decimals().call() == decimals

    transact(w3, owner, token.functions.mint(alice.address, 2 * units))
    bob_before = token.functions.balanceOf(bob.address).call()
    receipt = transact(w3, alice, token.functions.transfer(bob.address, units))

    assert receipt["status"] == 1
    assert token.functions.balanceOf(alice.address).call() == units
    assert token.functions.balanceOf(bob.address).call() == bob_before + units
    (event,) = token.events.Transfer().process_receipt(receipt)
    assert event["args"] == {"from": alice.address, "to": bob.address, "value": units}


def test_blocked_transfer_reverts_with_a_readable_reason(chain_a, token6):
    w3 = chain_a.web3
    owner, alice, bob = chain_a.accounts[:3]
    transact(w3, owner, token6.functions.mint(alice.address, 5_000_000))
    transact(w3, owner, token6.functions.setTransfersBlocked(True))

    # Before signing: gas estimation runs the call and the node returns the reason.
    with pytest.raises(ContractLogicError, match="TestToken: transfers are blocked"):
        transact(w3, alice, token6.functions.transfer(bob.address, 1_000_000))

    # Sent anyway (fixed gas): mined with status 0, the fee is spent, no token moved, and the
    # reason is recovered by replaying the transaction on its parent block.
    eth_before = w3.eth.get_balance(alice.address)
    receipt = transact(
        w3, alice, token6.functions.transfer(bob.address, 1_000_000), gas=100_000, check=False
    )
    assert receipt["status"] == 0
    fee = receipt["gasUsed"] * receipt["effectiveGasPrice"]
    assert fee > 0
    assert w3.eth.get_balance(alice.address) == eth_before - fee
    assert token6.functions.balanceOf(alice.address).call() == 5_000_000
    assert token6.functions.balanceOf(bob.address).call() == 0
    assert token6.events.Transfer().process_receipt(receipt) == ()
    reason = replay_revert_reason(w3, receipt["transactionHash"])
    assert reason == "execution reverted: TestToken: transfers are blocked"
    with pytest.raises(TransactionFailed):
        transact(w3, alice, token6.functions.transfer(bob.address, 1), gas=100_000)

    # The per-account blocklist refuses one recipient only.
    transact(w3, owner, token6.functions.setTransfersBlocked(False))
    transact(w3, owner, token6.functions.setBlocked(bob.address, True))
    with pytest.raises(ContractLogicError, match="TestToken: account is blocked"):
        transact(w3, alice, token6.functions.transfer(bob.address, 1))
    transact(w3, alice, token6.functions.transfer(chain_a.accounts[3].address, 1))
    assert token6.functions.balanceOf(chain_a.accounts[3].address).call() == 1


def test_automine_off_keeps_a_tx_pending_and_a_fee_bump_replaces_it(chain_a):
    w3 = chain_a.web3
    alice, bob = chain_a.accounts[4], chain_a.accounts[5]
    bob_before = w3.eth.get_balance(bob.address)
    nonce = w3.eth.get_transaction_count(alice.address)
    with chain_a.manual_mining():
        original = signed_transfer(chain_a, alice, bob.address, nonce=nonce, value=7)
        original_hash = w3.eth.send_raw_transaction(original.raw_transaction)
        time.sleep(0.2)
        assert w3.eth.get_transaction(original_hash)["blockNumber"] is None
        assert receipt_or_none(w3, original_hash) is None
        assert chain_a.pending_transaction_hashes() == [original_hash.to_0x_hex()]

        # anvil wants the max fee raised by at least 10 % (geth: both fees by 10 %).
        with pytest.raises(Web3RPCError, match="replacement transaction underpriced"):
            timid = signed_transfer(
                chain_a, alice, bob.address, nonce=nonce, value=7, tip=2 * GWEI, max_fee=20 * GWEI
            )
            w3.eth.send_raw_transaction(timid.raw_transaction)
        bump = signed_transfer(
            chain_a,
            alice,
            bob.address,
            nonce=nonce,
            value=7,
            tip=GWEI * 11 // 10,
            max_fee=22 * GWEI,
        )
        bump_hash = w3.eth.send_raw_transaction(bump.raw_transaction)
        assert chain_a.pending_transaction_hashes() == [bump_hash.to_0x_hex()]
        chain_a.mine()

    receipt = w3.eth.get_transaction_receipt(bump_hash)
    assert receipt["status"] == 1
    assert receipt_or_none(w3, original_hash) is None
    with pytest.raises(TransactionNotFound):
        w3.eth.get_transaction(original_hash)
    assert w3.eth.get_balance(bob.address) == bob_before + 7  # once
    # The loser's stored bytes can never land now: its nonce is taken.
    with pytest.raises(Web3RPCError, match="nonce too low"):
        w3.eth.send_raw_transaction(original.raw_transaction)


def test_dropped_tx_is_gone_and_rebroadcasting_its_stored_bytes_lands_it(chain_a):
    w3 = chain_a.web3
    alice, bob = chain_a.accounts[4], chain_a.accounts[5]
    nonce = w3.eth.get_transaction_count(alice.address)
    signed = signed_transfer(chain_a, alice, bob.address, nonce=nonce, value=11)
    with chain_a.manual_mining():
        tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
        assert chain_a.drop_transaction(tx_hash) == tx_hash.to_0x_hex()
        assert chain_a.pending_transaction_hashes() == []
        with pytest.raises(TransactionNotFound):
            w3.eth.get_transaction(tx_hash)
        assert chain_a.drop_transaction(tx_hash) is None  # nothing left to drop
        chain_a.mine()
        assert receipt_or_none(w3, tx_hash) is None
        assert w3.eth.get_transaction_count(alice.address) == nonce

        # Same bytes, same hash: no re-signing needed.
        assert w3.eth.send_raw_transaction(signed.raw_transaction) == tx_hash
        chain_a.mine()
    receipt = w3.eth.get_transaction_receipt(tx_hash)
    assert receipt["status"] == 1
    assert w3.eth.get_transaction_count(alice.address) == nonce + 1


def test_a_nonce_gap_waits_and_a_fee_under_the_base_fee_is_refused(chain_a):
    w3 = chain_a.web3
    alice, bob = chain_a.accounts[4], chain_a.accounts[5]
    nonce = w3.eth.get_transaction_count(alice.address)
    later = signed_transfer(chain_a, alice, bob.address, nonce=nonce + 1)
    later_hash = w3.eth.send_raw_transaction(later.raw_transaction)
    chain_a.mine()
    assert receipt_or_none(w3, later_hash) is None
    assert chain_a.rpc("txpool_status") == {"pending": "0x0", "queued": "0x1"}

    base_fee = w3.eth.get_block("latest")["baseFeePerGas"]
    cheap = signed_transfer(chain_a, alice, bob.address, nonce=nonce, tip=1, max_fee=base_fee // 2)
    with pytest.raises(Web3RPCError, match="max fee per gas less than block base fee"):
        w3.eth.send_raw_transaction(cheap.raw_transaction)

    # Filling the gap releases the queued one.
    w3.eth.send_raw_transaction(
        signed_transfer(chain_a, alice, bob.address, nonce=nonce).raw_transaction
    )
    assert w3.eth.wait_for_transaction_receipt(later_hash, poll_latency=0.02)["status"] == 1


def test_reorg_takes_an_included_tx_off_the_canonical_chain(chain_a):
    w3 = chain_a.web3
    alice, bob = chain_a.accounts[6], chain_a.accounts[7]
    nonce = w3.eth.get_transaction_count(alice.address)
    bob_before = w3.eth.get_balance(bob.address)
    signed = signed_transfer(chain_a, alice, bob.address, nonce=nonce, value=13)
    tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    included = w3.eth.wait_for_transaction_receipt(tx_hash, poll_latency=0.02)
    chain_a.mine(2)  # two confirmations on top
    head = w3.eth.block_number

    chain_a.reorg(3)  # replace the inclusion block and the two above it

    assert w3.eth.block_number == head  # same height, other blocks
    assert w3.eth.get_block(included["blockNumber"])["hash"] != included["blockHash"]
    assert receipt_or_none(w3, tx_hash) is None
    with pytest.raises(TransactionNotFound):
        w3.eth.get_transaction(tx_hash)  # not back in the mempool either
    assert chain_a.pending_transaction_hashes() == []
    assert w3.eth.get_transaction_count(alice.address) == nonce
    assert w3.eth.get_balance(bob.address) == bob_before

    # Re-broadcasting the stored bytes includes it again, in a new block.
    assert w3.eth.send_raw_transaction(signed.raw_transaction) == tx_hash
    again = w3.eth.wait_for_transaction_receipt(tx_hash, poll_latency=0.02)
    assert again["status"] == 1
    assert again["blockNumber"] == head + 1
    assert w3.eth.get_balance(bob.address) == bob_before + 13


def test_reorg_that_reincludes_the_tx_changes_its_block_hash(chain_a):
    w3 = chain_a.web3
    alice, bob = chain_a.accounts[6], chain_a.accounts[7]
    nonce = w3.eth.get_transaction_count(alice.address)
    signed = signed_transfer(chain_a, alice, bob.address, nonce=nonce, value=17)
    tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    before = w3.eth.wait_for_transaction_receipt(tx_hash, poll_latency=0.02)
    # The replacement block also carries another transaction: a replacement with only the same
    # transaction can be built identical to the block it replaces (same parent, same timestamp
    # when the chain's clock runs ahead of the wall clock), so the same hash.
    other = signed_transfer(
        chain_a, bob, alice.address, nonce=w3.eth.get_transaction_count(bob.address), value=1
    )

    chain_a.reorg(1, [(signed.raw_transaction, 0), (other.raw_transaction, 0)])

    after = w3.eth.get_transaction_receipt(tx_hash)
    assert after["status"] == 1
    assert after["blockNumber"] == before["blockNumber"]
    assert after["blockHash"] != before["blockHash"]


def test_snapshot_revert_removes_a_mined_tx_without_returning_it_to_the_mempool(chain_a):
    w3 = chain_a.web3
    alice, bob = chain_a.accounts[8], chain_a.accounts[9]
    snapshot = chain_a.snapshot()
    head = w3.eth.block_number
    tx_hash = w3.eth.send_raw_transaction(
        signed_transfer(
            chain_a, alice, bob.address, nonce=w3.eth.get_transaction_count(alice.address)
        ).raw_transaction
    )
    w3.eth.wait_for_transaction_receipt(tx_hash, poll_latency=0.02)

    assert chain_a.revert(snapshot)
    assert w3.eth.block_number == head
    assert receipt_or_none(w3, tx_hash) is None
    assert chain_a.pending_transaction_hashes() == []
    assert not chain_a.revert(snapshot)  # a snapshot id is used up by reverting to it


def test_an_anvil_process_starts_on_a_free_port_and_stops():
    assert find_anvil().is_file()
    with Anvil(chain_id=424242, automine=False) as chain:
        process = chain.process
        assert chain.running
        assert int(chain.rpc("eth_chainId"), 16) == 424242
        assert chain.get_automine() is False
        assert chain.accounts == dev_accounts(10)
    assert process.poll() is not None
    assert chain.process is None
    with pytest.raises(RuntimeError, match="not started"):
        chain.rpc("eth_chainId")


def test_contracts_compile_once_and_again_when_stale(tmp_path, compiled):
    assert build_is_fresh()
    assert {"TestToken", "StandinUSDC", "MessageTransmitter", "TokenMessenger"} <= set(compiled)
    build = tmp_path / "contracts.json"
    shutil.copy(BUILD_FILE, build)
    mtime = build.stat().st_mtime_ns
    assert load_artifacts(build)["TestToken"].bytecode == compiled["TestToken"].bytecode
    assert build.stat().st_mtime_ns == mtime  # fresh: not compiled again

    data = json.loads(build.read_text())
    data["sourcesDigest"] = "stale"
    data["contracts"]["TestToken"]["bytecode"] = "0x00"
    build.write_text(json.dumps(data))
    assert load_artifacts(build)["TestToken"].bytecode == compiled["TestToken"].bytecode

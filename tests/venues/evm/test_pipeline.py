"""Pipelined sends: a sender's transfers are broadcast without waiting for each other's
receipts, at most ``QTG_EVM_MAX_IN_FLIGHT`` of its nonces allocated and not mined at once, and
the nonce queue's rules hold inside the pipeline (a middle nonce left unused is filled, the
later ones land behind it in order)."""

import time

import pytest

from movements.executors.base import DeterministicError
from movements.models import MovementRequestNode
from movements.states import NodeState, RequestState
from tests.execution.conftest import run_workers_once
from tests.movements.drive import node
from tests.venues.evm.conftest import balance, settle, transfer
from venues.evm.tx import action
from venues.models import ChainTransaction, TxPurpose, TxState

pytestmark = [pytest.mark.devchain, pytest.mark.django_db]
S = TxState
NOT_MINED = (S.CREATED, S.SIGNED, S.BROADCAST, S.PENDING)


def sender_txs(sender):
    return list(ChainTransaction.objects.filter(sender=sender).order_by("nonce", "id"))


def settle_all(requests, chain, *, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        states = [settle(r, chain, timeout=timeout).request_state for r in requests]
        if all(state in (RequestState.COMPLETED, RequestState.FAILED) for state in states):
            return states
        assert time.monotonic() < deadline, states


def test_a_senders_transfers_are_all_broadcast_before_any_receipt(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    usdc = tokens["USDC"]
    treasury = devchain.accounts[1].address
    first = devchain.web3.eth.get_transaction_count(treasury)
    before = balance(devchain, usdc, treasury)
    devchain.set_automine(False)  # no block: no receipt for anything sent
    requests = [transfer(creator, recipient, amount=str(i + 1)) for i in range(5)]

    run_workers_once()

    txs = sender_txs(treasury)
    assert [tx.nonce for tx in txs] == list(range(first, first + 5))
    # Five broadcasts in flight at once, none of them waiting for another's receipt.
    assert {tx.state for tx in txs} <= {S.BROADCAST, S.PENDING}
    assert sorted(devchain.pending_transaction_hashes()) == sorted(tx.tx_hash for tx in txs)
    assert devchain.web3.eth.get_transaction_count(treasury) == first

    devchain.set_automine(True)
    assert settle_all(requests, devchain) == [RequestState.COMPLETED] * 5
    assert balance(devchain, usdc, recipient) == 15_000_000
    assert balance(devchain, usdc, treasury) == before - 15_000_000
    # Exactly once: one transaction per transfer, each signed once, mined in nonce order.
    txs = sender_txs(treasury)
    assert [(tx.nonce, tx.state) for tx in txs] == [(first + i, S.FINALIZED) for i in range(5)]
    assert all([e.to_state for e in tx.events.all()].count("SIGNED") == 1 for tx in txs)
    blocks = [
        (tx.block_number, devchain.web3.eth.get_transaction(tx.tx_hash)["transactionIndex"])
        for tx in txs
    ]
    assert blocks == sorted(blocks)


def test_no_more_nonces_than_the_bound_are_in_flight_and_the_rest_wait_uncounted(
    devchain, tokens, chain_config, fast_worker, creator, recipient, settings
):
    settings.QTG_EVM_MAX_IN_FLIGHT = 2
    usdc = tokens["USDC"]
    treasury = devchain.accounts[1].address
    first = devchain.web3.eth.get_transaction_count(treasury)
    devchain.set_automine(False)
    requests = [transfer(creator, recipient, amount=str(i + 1)) for i in range(5)]

    for _ in range(3):
        run_workers_once()
    txs = sender_txs(treasury)
    assert [tx.nonce for tx in txs] == [first, first + 1]
    waiting = [node(r, "transfer") for r in requests[2:]]
    assert [n.node_state for n in waiting] == [NodeState.READY] * 3
    # A wait for a block, not a venue error: nothing was allocated, nothing sent.
    assert all("in flight" in n.last_error and n.venue_errors == 0 for n in waiting)

    # The bound holds at every look while the queue drains, a block at a time.
    deadline = time.monotonic() + 60
    while any(r.request_state != RequestState.COMPLETED for r in requests):
        assert time.monotonic() < deadline, [r.request_state for r in requests]
        run_workers_once()
        mined = devchain.web3.eth.get_transaction_count(treasury)
        allocated = ChainTransaction.objects.filter(sender=treasury).count()
        assert first + allocated - mined <= 2
        devchain.mine()
        time.sleep(0.05)
        for r in requests:
            r.refresh_from_db()

    txs = sender_txs(treasury)
    assert [(tx.nonce, tx.state) for tx in txs] == [(first + i, S.FINALIZED) for i in range(5)]
    assert balance(devchain, usdc, recipient) == 15_000_000


def test_a_middle_nonce_that_failed_is_filled_and_the_later_ones_land_behind_it_in_order(
    devchain, tokens, chain_config, fast_worker, creator, recipient, monkeypatch
):
    usdc = tokens["USDC"]
    treasury = devchain.accounts[1].address
    first = devchain.web3.eth.get_transaction_count(treasury)
    before = balance(devchain, usdc, treasury)
    real = action.signer_of

    def refusing(call):
        if call.units == 2_000_000:
            raise DeterministicError("the signer refuses this transfer")
        return real(call)

    monkeypatch.setattr(action, "signer_of", refusing)
    devchain.set_automine(False)
    requests = [transfer(creator, recipient, amount=str(i + 1)) for i in range(3)]

    run_workers_once()

    # The middle one took nonce first+1 and failed before signing; the third is broadcast at
    # first+2 without waiting (it cannot be mined before first+1 is used).
    middle = node(requests[1], "transfer")
    assert middle.node_state == NodeState.FAILED
    [never_signed] = ChainTransaction.objects.filter(movement=requests[1])
    assert never_signed.nonce == first + 1 and not never_signed.tx_hash
    for request, nonce in ((requests[0], first), (requests[2], first + 2)):
        [sent] = ChainTransaction.objects.filter(movement=request)
        assert sent.nonce == nonce and sent.state in (S.BROADCAST, S.PENDING)
    devchain.set_automine(True)

    states = settle_all([requests[0], requests[2]], devchain)

    assert states == [RequestState.COMPLETED] * 2
    requests[1].refresh_from_db()
    assert requests[1].request_state == RequestState.FAILED
    [filler] = ChainTransaction.objects.filter(purpose=TxPurpose.NONCE_FILL)
    assert filler.nonce == first + 1 and filler.state == S.FINALIZED
    orphan = ChainTransaction.objects.get(movement=requests[1])
    assert orphan.state == S.REPLACED and not orphan.tx_hash
    landed = [tx for tx in sender_txs(treasury) if tx.state == S.FINALIZED]
    assert [tx.nonce for tx in landed] == [first, first + 1, first + 2]
    order = [
        (tx.block_number, devchain.web3.eth.get_transaction(tx.tx_hash)["transactionIndex"])
        for tx in landed
    ]
    assert order == sorted(order)
    assert devchain.web3.eth.get_transaction_count(treasury) == first + 3
    # Only the two transfers moved tokens.
    assert balance(devchain, usdc, recipient) == 4_000_000
    assert balance(devchain, usdc, treasury) == before - 4_000_000
    assert not MovementRequestNode.objects.filter(node_state=NodeState.UNKNOWN).exists()

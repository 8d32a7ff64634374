"""A nonce a node signed for and never broadcast (its worker died after signing, the
operator then cancelled the movement) is filled by a zero-value self-transfer: the orphan's
bytes never reach the chain, the sender's next transfer is mined behind the filler."""

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from movements.models import MovementAttention, MovementRequestNode
from movements.services import execution, movement_cancel
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from tests.execution.conftest import run_workers_once
from tests.movements.drive import node
from tests.venues.evm.conftest import CHAIN, balance, settle, transfer
from venues.evm import client
from venues.evm.config import evm_chain
from venues.evm.tx import sign as transfers
from venues.evm.tx.gaps import fill_nonce_gaps
from venues.models import ChainTransaction, TxPurpose, TxState

pytestmark = [pytest.mark.devchain, pytest.mark.django_db]
S = TxState


class WorkerKilled(BaseException):
    """The worker process dying (SIGKILL) at a crash point, in-process."""


def signed_then_cancelled(request, operator, monkeypatch) -> ChainTransaction:
    """The node's worker dies right after storing the signed bytes; its lease expires, the
    node goes back to READY and an operator cancels the movement. Returns the orphan."""
    real = transfers.crash_point

    def crash(name):
        if name == "after_sign":
            raise WorkerKilled(name)
        real(name)

    monkeypatch.setattr(transfers, "crash_point", crash)
    with pytest.raises(WorkerKilled):
        for _ in range(20):
            run_workers_once(owner="doomed-worker")
    monkeypatch.setattr(transfers, "crash_point", real)
    [orphan] = ChainTransaction.objects.filter(movement=request)
    assert orphan.state == S.SIGNED and orphan.raw_signed
    doomed = node(request, "transfer")
    assert doomed.node_state in (NodeState.PREPARING, NodeState.AWAITING_SIGNATURE)
    MovementRequestNode.objects.filter(pk=doomed.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert execution.reap_expired_leases() == 1
    assert node(request, "transfer").node_state == NodeState.READY
    movement_cancel(request=request, actor=Actor.for_user(operator), reason="changed plans")
    request.refresh_from_db()
    assert request.request_state == RequestState.CANCELLED
    assert node(request, "transfer").node_state == NodeState.CANCELLED
    orphan.refresh_from_db()
    assert orphan.state == S.SIGNED
    return orphan


def fillers():
    return list(ChainTransaction.objects.filter(purpose=TxPurpose.NONCE_FILL).order_by("id"))


def test_the_next_transfer_completes_behind_a_filler_of_the_cancelled_movements_nonce(
    devchain, tokens, chain_config, fast_worker, creator, operator, recipient, monkeypatch
):
    usdc = tokens["USDC"]
    treasury = devchain.accounts[1].address
    before = balance(devchain, usdc, treasury)
    first_nonce = devchain.web3.eth.get_transaction_count(treasury)
    cancelled = transfer(creator, recipient, amount="7")
    orphan = signed_then_cancelled(cancelled, operator, monkeypatch)
    assert orphan.nonce == first_nonce

    later = settle(transfer(creator, recipient, amount="3"), devchain)

    assert later.request_state == RequestState.COMPLETED
    [sent] = ChainTransaction.objects.filter(movement=later)
    assert sent.nonce == first_nonce + 1 and sent.state == S.FINALIZED
    # The filler took nonce N: a zero-value self-transfer, final, standing in for the orphan.
    [filler] = fillers()
    assert filler.nonce == first_nonce and filler.replaces_id == orphan.pk
    assert filler.state == S.FINALIZED
    mined = devchain.web3.eth.get_transaction(filler.tx_hash)
    assert (mined["from"], mined["to"], mined["value"]) == (treasury, treasury, 0)
    assert devchain.web3.eth.get_transaction_receipt(filler.tx_hash)["status"] == 1
    # The orphan is closed with the filler's hash as evidence and never reached the chain.
    orphan.refresh_from_db()
    assert orphan.state == S.REPLACED
    closing = orphan.events.get(to_state=S.REPLACED)
    assert closing.evidence["message"] == f"nonce filled by {filler.tx_hash}"
    w3 = devchain.web3
    assert client.receipt_of(w3, orphan.tx_hash) is None
    assert client.transaction_of(w3, orphan.tx_hash) is None
    # Only the later transfer moved tokens; the cancelled movement's 7 USDC never left.
    assert balance(devchain, usdc, recipient) == 3_000_000
    assert balance(devchain, usdc, treasury) == before - 3_000_000
    assert w3.eth.get_transaction_count(treasury) == first_nonce + 2
    # A routine fill asks no one.
    assert not MovementAttention.objects.filter(request__in=[cancelled, later]).exists()


def test_filling_twice_sends_one_filler(
    devchain, tokens, chain_config, fast_worker, creator, operator, recipient, monkeypatch
):
    treasury = devchain.accounts[1].address
    orphan = signed_then_cancelled(transfer(creator, recipient, amount="7"), operator, monkeypatch)
    chain = evm_chain(CHAIN)

    with devchain.manual_mining():
        first = fill_nonce_gaps(chain, treasury)
        second = fill_nonce_gaps(chain, treasury)
        [filler] = fillers()
        assert [tx.pk for tx in first.filled] == [filler.pk] and not second.filled
        assert devchain.pending_transaction_hashes() == [filler.tx_hash]
    devchain.mine(3)
    fill_nonce_gaps(chain, treasury)
    fill_nonce_gaps(chain, treasury)

    [filler] = fillers()
    assert filler.state == S.FINALIZED
    assert [e.to_state for e in filler.events.order_by("id")] == [
        "CREATED",
        "SIGNED",
        "BROADCAST",
        "PENDING",
        "CONFIRMED",
        "FINALIZED",
    ]
    orphan.refresh_from_db()
    assert orphan.state == S.REPLACED
    assert [e.to_state for e in orphan.events.order_by("id")].count("REPLACED") == 1
    assert devchain.web3.eth.get_transaction_count(treasury) == orphan.nonce + 1
    assert client.receipt_of(devchain.web3, orphan.tx_hash) is None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_workers_filling_the_same_gap_at_once_send_one_filler(
    devchain, tokens, chain_config, fast_worker, creator, operator, recipient, monkeypatch
):
    treasury = devchain.accounts[1].address
    orphan = signed_then_cancelled(transfer(creator, recipient, amount="7"), operator, monkeypatch)
    chain = evm_chain(CHAIN)
    start = threading.Barrier(4)

    def sweep(_):
        try:
            start.wait(timeout=10)
            return len(fill_nonce_gaps(chain, treasury).filled)
        finally:
            connection.close()

    with devchain.manual_mining():
        with ThreadPoolExecutor(max_workers=4) as pool:
            filled = list(pool.map(sweep, range(4)))
        [filler] = fillers()
        assert sorted(filled) == [0, 0, 0, 1]
        assert devchain.pending_transaction_hashes() == [filler.tx_hash]
    orphan.refresh_from_db()
    assert orphan.state == S.REPLACED and filler.replaces_id == orphan.pk

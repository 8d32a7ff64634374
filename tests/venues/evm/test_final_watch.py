"""After FINALIZED, the chain's ``post_final_watch``: a transfer final by the reviewed policy is
looked at for that window before the movement is COMPLETED, and a reorg deeper than the
policy trusted (above the chain's own checkpoint) pages ``final_reorg``, sends the movement to
MANUAL_INTERVENTION with its reservation HELD and compensates its ledger entry."""

from datetime import datetime
from decimal import Decimal

import pytest

from movements.models import MovementAttention, MovementEvent
from movements.states import RequestState
from tests.execution.conftest import assert_history_replays, node_path, run_workers_once
from tests.movements.drive import node
from tests.venues.evm.conftest import balance, settle, transfer
from venues.models import ChainLedgerEntry, ChainTransaction, LedgerKind, TxState

pytestmark = [pytest.mark.devchain, pytest.mark.django_db]
S = TxState
DEPTH_POLICY = {"depth": 2, "reason": "test chain: its finalized tag is not trusted"}


@pytest.fixture
def lagging(devchain, chain_config, monkeypatch):
    """The chain behind the stand-in proxy, its ``finalized`` tag trailing the head by 30
    blocks: a reorg of a few blocks stays above the chain's checkpoint."""
    from standins.rpc_proxy import LossyRpcProxy
    from tests.venues.evm.conftest import RPC_ENV

    with LossyRpcProxy(devchain.url) as running:
        monkeypatch.setenv(RPC_ENV, running.url)
        running.trail_finalized(30)
        yield running


def watched(request, chain):
    """The observe node, once the policy called its transaction final (a block mined each
    turn; the movement is EXECUTING meanwhile)."""
    for _ in range(300):
        run_workers_once()
        observe = node(request, "transfer_observe")
        if observe.result.get("final_since"):
            return observe
        request.refresh_from_db()
        assert request.request_state == RequestState.EXECUTING
        chain.mine()
    raise AssertionError(f"never final: {node_path(request, 'transfer_observe')}")


def test_a_finalized_transfer_a_deeper_reorg_removes_pages_final_reorg_and_holds_the_money(
    devchain, tokens, lagging, chain_config, fast_worker, creator, recipient
):
    chain_config(finality=DEPTH_POLICY, post_final_watch=120, broadcast_window_seconds=1)
    request = transfer(creator, recipient, amount="9")
    observe = watched(request, devchain)
    [tx] = ChainTransaction.objects.filter(movement=request)
    assert tx.state == S.FINALIZED and node(request, "transfer").node_state == "COMPLETED"
    request.refresh_from_db()
    # Final by the policy, still watched: not COMPLETED, the money still held.
    assert request.request_state == RequestState.EXECUTING
    assert request.reservation.state == "HELD"
    assert balance(devchain, tokens["USDC"], recipient) == 9_000_000
    [entry] = ChainLedgerEntry.objects.filter(chain_transaction=tx)
    assert entry.kind == LedgerKind.FINAL and entry.amount == Decimal("9")
    old_block, old_hash = tx.block_number, tx.block_hash
    depth = devchain.block_number() - old_block + 1
    assert depth > DEPTH_POLICY["depth"]
    assert observe.result["block_hash"] == old_hash

    # Deeper than the policy trusted, above the checkpoint: the transfer is gone.
    devchain.reorg(depth)
    request = settle(request, devchain, mine=0)

    assert request.request_state == RequestState.MANUAL_INTERVENTION
    assert request.reservation.state == "HELD"
    assert balance(devchain, tokens["USDC"], recipient) == 0
    attention = MovementAttention.objects.get(request=request, reason="final_reorg")
    assert attention.node_key == "transfer_observe"
    assert tx.tx_hash in attention.message
    tx.refresh_from_db()
    assert tx.state == S.PENDING and tx.block_hash == ""
    back = tx.events.get(from_state=S.FINALIZED, to_state=S.PENDING).evidence["final_reorg"]
    assert back["old_block_hash"] == old_hash and back["now_in_block"] is None
    assert back["finalized_block"]["number"] < old_block  # above the chain's checkpoint
    final, reversal = ChainLedgerEntry.objects.filter(chain_transaction=tx).order_by("id")
    assert (final.kind, reversal.kind) == (LedgerKind.FINAL, LedgerKind.REVERSAL)
    assert reversal.compensates == final and reversal.amount == -final.amount
    assert sum(e.amount for e in (final, reversal)) == 0
    assert "UNKNOWN" in node_path(request, "transfer_observe")
    derived = MovementEvent.objects.get(
        request=request, node__isnull=True, new_state=RequestState.MANUAL_INTERVENTION
    )
    assert derived.old_state == RequestState.EXECUTING
    assert_history_replays(request)


def test_a_transfer_completes_only_once_its_post_final_watch_has_passed(
    devchain, tokens, lagging, chain_config, fast_worker, creator, recipient
):
    chain_config(finality=DEPTH_POLICY, post_final_watch=2, broadcast_window_seconds=1)
    request = transfer(creator, recipient, amount="1.5")
    final_since = datetime.fromisoformat(watched(request, devchain).result["final_since"])

    request = settle(request, devchain)

    assert request.request_state == RequestState.COMPLETED
    assert request.reservation.state == "CONSUMED"
    completed = node(request, "transfer_observe").events.get(new_state="COMPLETED")
    assert (completed.created_at - final_since).total_seconds() >= 2
    assert completed.detail["watched_seconds"] == 2
    [tx] = ChainTransaction.objects.filter(movement=request)
    assert [e.kind for e in ChainLedgerEntry.objects.filter(chain_transaction=tx)] == ["final"]


def test_a_transfer_whose_nonce_a_final_foreign_transaction_took_is_not_failed_while_watched(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    """The foreign transaction that used the nonce is final, then a reorg deeper than the
    checkpoint takes it away and mines ours: while the watch lasts, the node is never FAILED
    (it was, a window after the first sighting), and it completes with the money moved once."""
    import time

    from standins.contracts import send_transaction

    chain_config(broadcast_window_seconds=1, post_final_watch=10)
    treasury = devchain.accounts[1]
    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="8")
        [ours] = run_until(lambda: [t for t in chain_txs(request) if t.state == S.PENDING])
        devchain.drop_transaction(ours.tx_hash)
        send_transaction(
            devchain.web3,
            treasury,
            {"to": treasury.address, "value": 0, "nonce": ours.nonce},
            wait=False,
        )
        devchain.mine()
    spender_block = devchain.block_number()
    # Final (anvil's checkpoint is 2 behind) and seen so for longer than the window.
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        run_workers_once()
        devchain.mine()
        time.sleep(0.05)
    ours.refresh_from_db()
    noted = ours.events.filter(evidence__nonce_spent__verdict="note")
    assert noted.exists(), [e.evidence for e in ours.events.all()]
    assert ours.state not in (S.DROPPED, S.FAILED)
    assert node(request, "transfer").node_state != "FAILED"
    request.refresh_from_db()
    assert request.request_state == RequestState.EXECUTING
    assert request.reservation.state == "HELD"

    # The chain takes the foreign transaction back and mines ours in its place.
    devchain.reorg(devchain.block_number() - spender_block + 1, [(ours.raw_signed, 0)])
    request = settle(request, devchain, timeout=45)

    assert request.request_state == RequestState.COMPLETED
    assert "FAILED" not in node_path(request, "transfer")
    [ours] = chain_txs(request)
    assert ours.state == S.FINALIZED
    assert balance(devchain, tokens["USDC"], recipient) == 8_000_000


def chain_txs(request):
    return list(ChainTransaction.objects.filter(movement=request).order_by("id"))


def run_until(predicate, *, turns=200):
    for _ in range(turns):
        run_workers_once()
        value = predicate()
        if value:
            return value
    raise AssertionError("the condition never held")


def test_a_transfer_mined_after_its_node_was_concluded_failed_pages_a_person(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    """Past the watch the foreign transaction's nonce use is concluded (DROPPED, the node and
    the movement FAILED); then the chain takes it back and mines ours: the concluded node is
    still watched, its transaction walks back and an operator is asked."""
    from standins.contracts import send_transaction
    from venues.evm.watch import watch_concluded

    chain_config(broadcast_window_seconds=1, post_final_watch=2)
    treasury = devchain.accounts[1]
    with devchain.manual_mining():
        request = transfer(creator, recipient, amount="6")
        [ours] = run_until(lambda: [t for t in chain_txs(request) if t.state == S.PENDING])
        devchain.drop_transaction(ours.tx_hash)
        send_transaction(
            devchain.web3,
            treasury,
            {"to": treasury.address, "value": 0, "nonce": ours.nonce},
            wait=False,
        )
        devchain.mine()
    spender_block = devchain.block_number()
    request = settle(request, devchain)
    assert request.request_state == RequestState.FAILED
    assert watch_concluded() == 0  # nothing mined of ours yet

    devchain.reorg(devchain.block_number() - spender_block + 1, [(ours.raw_signed, 0)])
    assert watch_concluded() == 1

    ours.refresh_from_db()
    assert ours.state == S.CONFIRMED
    back = ours.events.get(from_state=S.DROPPED, to_state=S.CONFIRMED).evidence
    assert back["late_sighting"]["block_hash"] == ours.block_hash
    attention = MovementAttention.objects.get(request=request, reason="late_result")
    assert attention.node_key == "transfer" and ours.tx_hash in attention.message
    assert balance(devchain, tokens["USDC"], recipient) == 6_000_000
    request.refresh_from_db()
    # FAILED has no way out in the spec's table: the movement keeps it, a person is asked.
    assert request.request_state == RequestState.FAILED
    assert watch_concluded() == 0  # raised once


def test_a_node_in_its_post_final_watch_is_not_stuck(chain_config, settings):
    from movements.services.attention import stuck_after

    chain_config(post_final_watch=7200)

    waits = stuck_after("evm_transfer_observe").total_seconds()
    assert waits == settings.QTG_STUCK_AFTER_SECONDS + 7200

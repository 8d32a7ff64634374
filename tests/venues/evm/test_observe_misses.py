"""The observe of an EVM transaction does not conclude a reorg from one receipt lookup that
answers null: a backend of a load-balanced provider that is behind the others (the stand-in
proxy's ``miss_receipts``) is asked again, with every configured endpoint, before a
transaction is called gone. A transaction really gone is still a reorg."""

import pytest

from movements.executors.base import ExecutionContext, ObservedStatus, Upstream
from movements.models import MovementAttention
from movements.states import RequestState
from standins.contracts import send_transaction
from tests.execution.conftest import node_path
from tests.venues.evm.conftest import CHAIN, RPC_ENV, balance, settle, transfer
from tests.venues.evm.test_final_watch import DEPTH_POLICY, watched
from tests.venues.evm.test_transfers import attention_reasons, chain_txs, run_until
from venues.evm.executors import ChainTxObserve
from venues.models import ChainLedgerEntry, ChainTransaction, TxState

pytestmark = [pytest.mark.devchain, pytest.mark.django_db]


@pytest.fixture
def through_lossy(lossy, chain_config, monkeypatch):
    """The product reads the devchain through the stand-in proxy (its only endpoint)."""
    monkeypatch.setenv(RPC_ENV, lossy.url)
    return lossy


def test_a_watched_final_transfer_whose_receipt_one_lookup_misses_completes_unpaged(
    devchain, tokens, through_lossy, chain_config, fast_worker, creator, recipient
):
    chain_config(finality=DEPTH_POLICY, post_final_watch=2, broadcast_window_seconds=1)
    request = transfer(creator, recipient, amount="9")
    tx_hash = watched(request, devchain).result["tx_hash"]

    through_lossy.miss_receipts(tx_hash, times=1)
    request = settle(request, devchain)

    assert ("eth_getTransactionReceipt", tx_hash.lower()) in through_lossy.lagged
    assert request.request_state == RequestState.COMPLETED
    assert "UNKNOWN" not in node_path(request, "transfer_observe")
    assert not MovementAttention.objects.filter(request=request).exists()
    [tx] = ChainTransaction.objects.filter(movement=request)
    assert tx.state == TxState.FINALIZED
    assert not tx.events.filter(from_state=TxState.FINALIZED).exists()
    assert [e.kind for e in ChainLedgerEntry.objects.filter(chain_transaction=tx)] == ["final"]
    assert balance(devchain, tokens["USDC"], recipient) == 9_000_000


def _sent(devchain, recipient) -> tuple[str, str]:
    """A transfer mined on the devchain: its hash and its block's hash."""
    receipt = send_transaction(devchain.web3, devchain.accounts[1], {"to": recipient, "value": 1})
    return receipt["transactionHash"].to_0x_hex(), receipt["blockHash"].to_0x_hex()


def _looked_at(tx_hash: str, block_hash: str) -> ExecutionContext:
    """The observe's context once an earlier look saw ``tx_hash`` in ``block_hash``."""
    return ExecutionContext(
        request_id="r-1",
        node_id=2,
        node_key="observe",
        attempt=1,
        asset="ETH",
        amount=1,
        source="treasury",
        destination="",
        config={"chain": CHAIN, "source_node": "send"},
        params={},
        result={"block_hash": block_hash},
        upstream={"send": Upstream("chain_tx_upstream", "COMPLETED", tx_hash, {}, {})},
    )


def test_a_seen_transaction_whose_receipt_one_lookup_misses_is_not_a_reorg(
    devchain, through_lossy, chain_config, recipient
):
    tx_hash, block_hash = _sent(devchain, recipient)
    through_lossy.miss_receipts(tx_hash, times=1)

    observation = ChainTxObserve().observe(_looked_at(tx_hash, block_hash))

    assert ("eth_getTransactionReceipt", tx_hash.lower()) in through_lossy.lagged
    assert observation.status == ObservedStatus.PENDING
    assert "attention" not in observation.detail
    assert observation.detail["sighting"]["block_hash"] == block_hash
    again = ChainTxObserve().observe(_looked_at(tx_hash, block_hash))
    assert again.status == ObservedStatus.PENDING and again.detail["block_hash"] == block_hash


def test_a_seen_transaction_a_reorg_removed_is_still_a_reorg(devchain, chain_config, recipient):
    tx_hash, block_hash = _sent(devchain, recipient)
    devchain.reorg(1)  # its block replaced, without it

    observation = ChainTxObserve().observe(_looked_at(tx_hash, block_hash))

    assert observation.status == ObservedStatus.REORG
    assert observation.detail["attention"]["reason"] == "reorg"
    assert observation.detail["old_block_hash"] == block_hash
    assert [e["endpoint"] for e in observation.detail["endpoints"]] == [RPC_ENV]


def test_a_confirmed_transfer_whose_receipt_one_lookup_misses_is_not_walked_back_or_paged(
    devchain, tokens, through_lossy, chain_config, fast_worker, creator, recipient
):
    chain_config(confirmations=4)
    request = transfer(creator, recipient, amount="3")
    [tx] = run_until(
        lambda: [t for t in chain_txs(request) if t.state == TxState.CONFIRMED],
        each=devchain.mine,
    )

    through_lossy.miss_receipts(tx.tx_hash, times=1)
    request = settle(request, devchain)

    assert ("eth_getTransactionReceipt", tx.tx_hash.lower()) in through_lossy.lagged
    assert request.request_state == RequestState.COMPLETED
    [tx] = chain_txs(request)
    assert tx.state == TxState.FINALIZED
    assert not tx.events.filter(from_state=TxState.CONFIRMED, to_state=TxState.PENDING).exists()
    assert "reorg" not in attention_reasons(request)
    assert balance(devchain, tokens["USDC"], recipient) == 3_000_000

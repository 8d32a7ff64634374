"""What the chain's node is asked per transfer, counted where the node sees it (the stand-in
proxy in front of anvil): facts that cannot change are read once per process, facts of a
block once per block, and a new nonce costs one round trip of reads, not one per fact."""

import pytest

from movements.services import execution
from movements.states import RequestState
from tests.venues.evm.conftest import RPC_ENV, balance, settle, transfer
from venues.models import ChainTransaction, TxState

pytestmark = [pytest.mark.devchain, pytest.mark.django_db]
S = TxState


@pytest.fixture
def counted(devchain, chain_config, monkeypatch):
    """The product talks to the devchain through the stand-in proxy, which logs each call
    (a new URL: a fresh client, as in a new process)."""
    from standins.rpc_proxy import LossyRpcProxy

    with LossyRpcProxy(devchain.url) as proxy:
        monkeypatch.setenv(RPC_ENV, proxy.url)
        yield proxy


def round_trips(calls) -> int:
    """HTTP requests the node answered (a JSON-RPC batch is one, whatever it carries)."""
    return len(calls) - sum(size for method, size in calls if method == "batch")


def asked(calls, method, first_param=None) -> int:
    return sum(
        1
        for name, params in calls
        if name == method and (first_param is None or (params and params[0] == first_param))
    )


def test_the_chain_id_is_read_once_per_process_whatever_the_number_of_transfers(
    devchain, tokens, counted, fast_worker, creator, recipient
):
    requests = [transfer(creator, recipient, amount=str(i + 1)) for i in range(3)]

    states = [settle(request, devchain).request_state for request in requests]

    assert states == [RequestState.COMPLETED] * 3
    assert balance(devchain, tokens["USDC"], recipient) == 6_000_000
    assert asked(counted.calls, "eth_chainId") == 1


def test_a_transfer_is_prepared_and_broadcast_in_two_round_trips(
    devchain, tokens, counted, fast_worker, creator, recipient
):
    treasury = devchain.accounts[1].address
    devchain.set_automine(False)
    requests = [transfer(creator, recipient, amount=str(i + 1)) for i in range(4)]
    # The token's decimals are checked once per process (a fact, read at create).
    before = len(counted.calls)

    assert execution.dispatch_ready_nodes(owner="test-worker") == 4

    calls = counted.calls[before:]
    txs = ChainTransaction.objects.filter(movement_id__in=[r.pk for r in requests])
    assert sorted(tx.state for tx in txs) == [S.BROADCAST] * 4
    assert sorted(devchain.pending_transaction_hashes()) == sorted(tx.tx_hash for tx in txs)
    # Per transfer: the nonce counts, the head and the gas estimate in one batch, then the
    # send (and, once per process, the chain id).
    assert asked(calls, "eth_chainId") <= 1
    assert round_trips(calls) - asked(calls, "eth_chainId") == 2 * 4, calls
    assert asked(calls, "eth_estimateGas") == 4
    assert asked(calls, "eth_sendRawTransaction") == 4
    nonces = sorted(tx.nonce for tx in txs)
    assert nonces == list(range(devchain.web3.eth.get_transaction_count(treasury), nonces[0] + 4))


def test_transfers_final_in_one_look_read_the_finalized_checkpoint_once(
    devchain, tokens, counted, fast_worker, creator, recipient
):
    devchain.set_automine(False)
    requests = [transfer(creator, recipient, amount=str(i + 1)) for i in range(4)]
    assert execution.dispatch_ready_nodes(owner="test-worker") == 4
    devchain.mine(1)  # all four in one block
    devchain.mine(6)  # past 3 confirmations and the finalized tag (2 behind the head)
    before = len(counted.calls)

    assert execution.observe_submitted_nodes(owner="test-worker") == 4

    calls = counted.calls[before:]
    txs = ChainTransaction.objects.filter(movement_id__in=[r.pk for r in requests])
    assert sorted(tx.state for tx in txs) == [S.FINALIZED] * 4
    assert asked(calls, "eth_getBlockByNumber", "finalized") == 1


def test_the_proxy_the_environment_names_still_carries_the_calls(devchain, monkeypatch):
    """The environment is read once per client, not per request: what it says still holds."""
    from standins.rpc_proxy import LossyRpcProxy
    from venues.evm import client

    with LossyRpcProxy(devchain.url) as forward:
        monkeypatch.setenv("HTTP_PROXY", forward.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        w3 = client._client_for(devchain.url, 7.25)  # a timeout of its own: a new client

        assert w3.eth.block_number == devchain.block_number()

    assert asked(forward.calls, "eth_blockNumber") == 1


def test_a_transfer_the_chain_refuses_to_estimate_fails_without_taking_a_nonce(
    devchain, tokens, counted, fast_worker, creator, recipient
):
    """The estimate rides in the batch with the nonce counts; refused there, it is asked
    alone and its refusal fails the node (more than the treasury holds), no nonce taken."""
    treasury = devchain.accounts[1].address
    request = transfer(creator, recipient, asset="DAI", amount="2000000")

    request = settle(request, devchain)

    assert request.request_state == RequestState.FAILED
    assert not ChainTransaction.objects.filter(movement_id=request.pk).exists()
    assert devchain.web3.eth.get_transaction_count(treasury, "pending") == (
        devchain.web3.eth.get_transaction_count(treasury, "latest")
    )
    failed = request.nodes.get(node_key="transfer")
    assert "gas estimate refused" in failed.last_error
    assert asked(counted.calls, "eth_sendRawTransaction") == 0

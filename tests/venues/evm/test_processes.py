"""Real Celery worker processes and beat on PostgreSQL and a real broker, sending on anvil:
a worker SIGKILLed in the middle of a transfer, and three workers sharing one sender."""

import pytest

from movements.models import MovementEvent
from movements.states import RequestState
from tests.execution.conftest import Cluster, assert_history_replays, node_path, wait_for
from tests.venues.evm.conftest import balance, transfer
from venues.models import ChainTransaction, TxState

pytestmark = [
    pytest.mark.devchain,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

SETTLED = {RequestState.COMPLETED, RequestState.FAILED, RequestState.MANUAL_INTERVENTION}


@pytest.fixture
def cluster(devchain, tokens, chain_config, tmp_path):
    """Beat and no worker yet; blocks are mined every second, finality at 2 confirmations."""
    config = chain_config(confirmations=2)
    devchain.set_interval_mining(1)
    running = Cluster(tmp_path, workers=0)
    running.env["QTG_CHAINS_CONFIG"] = str(config)
    running.start()
    yield running
    running.stop()


def settled(request, timeout=90):
    def check():
        request.refresh_from_db()
        return request.request_state in SETTLED

    wait_for(check, timeout=timeout, message=f"movement stayed {request.request_state}")
    return request


@pytest.mark.parametrize("point", ["after_sign", "before_broadcast", "after_broadcast"])
def test_a_worker_killed_mid_transfer_moves_the_balance_once_with_one_transaction(
    cluster, devchain, tokens, creator, recipient, point
):
    cluster.env["QTG_EVM_CRASH_AT"] = point
    doomed = cluster.start_worker()
    request = transfer(creator, recipient, amount="9.5")
    wait_for(lambda: doomed.poll() is not None, timeout=60, message="the worker did not die")
    del cluster.env["QTG_EVM_CRASH_AT"]
    cluster.start_worker()

    request = settled(request)

    assert request.request_state == RequestState.COMPLETED
    assert balance(devchain, tokens["USDC"], recipient) == 9_500_000
    [tx] = ChainTransaction.objects.filter(movement=request)
    assert tx.state == TxState.FINALIZED
    path = node_path(request, "transfer")
    if point == "after_sign":
        # Died before SUBMITTING: back to READY, the stored bytes re-used, never re-signed.
        assert path.count("AWAITING_SIGNATURE") == 2 and "UNKNOWN" not in path
        assert list(tx.events.values_list("to_state", flat=True)).count("SIGNED") == 1
    else:
        # Died while SUBMITTING: the lease expired, recovery asked the chain by hash.
        assert path[path.index("SUBMITTING") + 1] == "UNKNOWN"
        assert path.count("SUBMITTING") == 1
    assert_history_replays(request)


# Enough that, on a loaded machine, one worker's sweeps do not take them all before the others'
# (with 9, one worker sent every one in a CI run beside the PostgreSQL suite).
TRANSFERS = 18


def test_three_workers_sending_from_one_address_use_contiguous_nonces_never_twice(
    cluster, devchain, tokens, creator, recipient
):
    # One node per sweep and per claim: while several transfers are due, each tick fans out
    # several sweep tasks (QTG_SWEEP_FANOUT), one node each, handed to the workers in turn,
    # instead of one worker's sweep taking the transfers one after another as they come.
    cluster.env.update(QTG_DISPATCH_BATCH="1", QTG_CLAIM_BATCH="1")
    cluster.start_workers(3)
    treasury = devchain.accounts[1].address
    first = devchain.web3.eth.get_transaction_count(treasury)
    requests = [transfer(creator, recipient, amount="1.25") for _ in range(TRANSFERS)]

    for request in requests:
        settled(request, timeout=180)

    assert {r.request_state for r in requests} == {RequestState.COMPLETED}
    nonces = sorted(ChainTransaction.objects.values_list("nonce", flat=True))
    assert nonces == list(range(first, first + TRANSFERS))
    assert devchain.web3.eth.get_transaction_count(treasury) == first + TRANSFERS
    assert balance(devchain, tokens["USDC"], recipient) == TRANSFERS * 1_250_000
    actors = MovementEvent.objects.filter(
        node_key="transfer", new_state="SUBMITTING", actor_id__startswith="worker:"
    ).values_list("actor_id", flat=True)
    assert len({actor.split(":")[2] for actor in actors}) >= 2, "one worker did all the work"


@pytest.fixture
def lagging_cluster(devchain, tokens, chain_config, tmp_path, monkeypatch):
    """Beat, no worker yet, every process reaching the chain through a backend that lags
    (``standins.rpc_proxy``: the test makes it answer "not found" for chosen hashes)."""
    from standins.rpc_proxy import LossyRpcProxy
    from tests.venues.evm.conftest import RPC_ENV

    with LossyRpcProxy(devchain.url) as proxy:
        monkeypatch.setenv(RPC_ENV, proxy.url)
        config = chain_config(confirmations=2, broadcast_window_seconds=2)
        devchain.set_interval_mining(1)
        running = Cluster(tmp_path, workers=0)
        running.env["QTG_CHAINS_CONFIG"] = str(config)
        running.start()
        try:
            yield running, proxy
        finally:
            running.stop()


def test_worker_kills_and_a_lagging_backend_leave_balances_matching_the_completed_transfers(
    lagging_cluster, devchain, tokens, creator, recipient
):
    """Issue 25's run: real workers SIGKILLed while every transaction's receipt and body are
    "not found" for a while after it is signed. Whatever ends, the recipient holds exactly
    the COMPLETED transfers, and no movement whose transfer is on chain is FAILED or had its
    reservation released."""
    import time
    from decimal import Decimal

    cluster, proxy = lagging_cluster
    usdc = tokens["USDC"]
    before = balance(devchain, usdc, recipient)
    amounts = ["1.5", "2.25", "0.75", "3", "1.125", "2"]
    requests = [transfer(creator, recipient, amount=amount) for amount in amounts]
    lagged, deaths, deadline = set(), [], time.monotonic() + 300

    def lag_new_transactions():
        for tx_hash in ChainTransaction.objects.exclude(tx_hash="").values_list(
            "tx_hash", flat=True
        ):
            if tx_hash not in lagged:
                proxy.lag_lookups(tx_hash, seconds=15)
                lagged.add(tx_hash)

    # Two workers that SIGKILL themselves at a crash point (QTG_EVM_CRASH_AT), one after the
    # other.
    for point in ("after_broadcast", "before_broadcast"):
        cluster.env["QTG_EVM_CRASH_AT"] = point
        doomed = cluster.start_worker()
        while doomed.poll() is None and time.monotonic() < deadline:
            lag_new_transactions()
            time.sleep(0.1)
        deaths.append(point)
    del cluster.env["QTG_EVM_CRASH_AT"]
    cluster.start_worker()
    survivor = cluster.start_worker()
    killed = False
    while time.monotonic() < deadline:
        lag_new_transactions()
        if not killed and survivor.poll() is None:
            cluster.kill(survivor.pid)  # and one SIGKILL in the middle of the run
            cluster.start_worker()
            killed = True
        for request in requests:
            request.refresh_from_db()
        if all(r.request_state in SETTLED for r in requests):
            break
        time.sleep(0.2)
    kills = len(deaths) + killed

    assert kills == 3 and proxy.lagged
    assert all(r.request_state in SETTLED for r in requests), [r.request_state for r in requests]
    from web3.exceptions import TransactionNotFound

    w3 = devchain.web3

    def mined(tx_hash):
        try:
            return w3.eth.get_transaction_receipt(tx_hash) is not None
        except TransactionNotFound:  # signed, never mined (a worker died before sending it)
            return False

    completed = Decimal(0)
    for request in requests:
        on_chain = [
            tx
            for tx in ChainTransaction.objects.filter(movement=request).exclude(tx_hash="")
            if mined(tx.tx_hash)
        ]
        request.reservation.refresh_from_db()
        if on_chain:
            assert request.request_state != RequestState.FAILED, request.pk
            assert request.reservation.state != "RELEASED", request.pk
        if request.request_state == RequestState.COMPLETED:
            completed += request.amount
            assert [tx.state for tx in on_chain] == [TxState.FINALIZED]
    moved = balance(devchain, usdc, recipient) - before
    assert moved == int(completed * 10**6)
    assert not ChainTransaction.objects.filter(state=TxState.DROPPED).exists()

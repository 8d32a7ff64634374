"""CCTP through real Celery worker processes and beat on PostgreSQL and a real broker, with
both devchains mining a block a second: a worker SIGKILLed right after broadcasting the burn
leaves one burn and one mint; one SIGKILLed right after broadcasting the mint leaves one mint,
and neither needs a person."""

import pytest

from movements.states import RequestState
from tests.execution.conftest import Cluster, assert_history_replays, node_path, wait_for
from venues.models import ChainTransaction

from .test_cctp_movements import UNITS, burn_message, create, mints

pytestmark = [
    pytest.mark.devchain,
    pytest.mark.standin,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def cluster(chains_config, settings, chain_a, chain_b, tmp_path):
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    from qtg.core.venues import provide_venues

    from .conftest import TREASURY

    provide_venues([TREASURY])
    for chain in (chain_a, chain_b):
        chain.set_interval_mining(1)
    running = Cluster(tmp_path, workers=0)
    running.env["QTG_VENUES"] = "local"
    running.env["QTG_CHAINS_CONFIG"] = settings.QTG_CHAINS_CONFIG
    running.start()
    yield running
    running.stop()


def test_a_worker_killed_after_broadcasting_the_burn_leaves_one_burn_and_one_mint(
    cluster, cctp, chain_a, chain_b, creator
):
    a, b = cctp
    treasury, bob = chain_a.accounts[1].address, chain_b.accounts[2].address
    a.mint_usdc(treasury, 100 * 10**6)
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)
    cluster.env["QTG_EVM_CRASH_AT"] = "after_broadcast"
    doomed = cluster.start_worker()
    request = create(creator, bob)
    wait_for(lambda: doomed.poll() is not None, timeout=90, message="the worker did not die")
    del cluster.env["QTG_EVM_CRASH_AT"]
    cluster.start_worker()

    # The burn's lease expires: UNKNOWN, and recovery finds it on chain by its hash; nothing
    # waits for a person.
    def done():
        request.refresh_from_db()
        return request.request_state in (
            RequestState.COMPLETED,
            RequestState.FAILED,
            RequestState.MANUAL_INTERVENTION,
        )

    wait_for(done, timeout=180, message="the movement did not finish")

    assert request.request_state == RequestState.COMPLETED
    path = node_path(request, "burn")
    assert path[path.index("SUBMITTING") + 1] == "UNKNOWN"
    assert path.count("SUBMITTING") == 1  # never submitted twice
    assert ChainTransaction.objects.filter(movement=request, node__node_key="burn").count() == 1
    assert a.usdc_balance(treasury) == before_a - UNITS
    assert b.usdc_balance(bob) == before_b + UNITS
    assert len(mints(b, burn_message(request, a).nonce)) == 1
    assert_history_replays(request)


def test_a_worker_killed_after_broadcasting_the_mint_completes_by_itself_with_one_mint(
    cluster, cctp, chain_a, chain_b, creator
):
    a, b = cctp
    treasury, bob = chain_a.accounts[1].address, chain_b.accounts[2].address
    a.mint_usdc(treasury, 100 * 10**6)
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)
    cluster.env["QTG_EVM_CRASH_AT"] = "after_broadcast@arbitrum"  # the mint, not the burn
    doomed = cluster.start_worker()
    request = create(creator, bob)
    wait_for(lambda: doomed.poll() is not None, timeout=120, message="the worker did not die")
    del cluster.env["QTG_EVM_CRASH_AT"]
    cluster.start_worker()

    def done():
        request.refresh_from_db()
        return request.request_state in (
            RequestState.COMPLETED,
            RequestState.FAILED,
            RequestState.MANUAL_INTERVENTION,
        )

    wait_for(done, timeout=180, message="the movement did not finish")

    assert request.request_state == RequestState.COMPLETED  # nobody was asked
    path = node_path(request, "mint")
    assert path[path.index("SUBMITTING") + 1] == "UNKNOWN"
    assert path.count("SUBMITTING") == 1
    assert ChainTransaction.objects.filter(movement=request, node__node_key="mint").count() == 1
    assert a.usdc_balance(treasury) == before_a - UNITS
    assert b.usdc_balance(bob) == before_b + UNITS
    assert len(mints(b, burn_message(request, a).nonce)) == 1
    assert request.reservation.state == "CONSUMED"
    assert_history_replays(request)

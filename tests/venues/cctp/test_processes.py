"""CCTP through real Celery worker processes and beat on PostgreSQL and a real broker, with
both devchains mining a block a second: a worker SIGKILLed right after broadcasting the burn
leaves one burn and one mint."""

import pytest

from movements.services import intervention_resume
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from tests.execution.conftest import Cluster, assert_history_replays, node_path, wait_for
from tests.movements.drive import node
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
    cluster, cctp, chain_a, chain_b, creator, operator
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

    # The burn's lease expires: UNKNOWN, and recovery finds it on chain by its hash. Whether
    # the movement was stopped for a person meanwhile depends on when its state was derived
    # (while the node was UNKNOWN, or only after recovery settled it); if so, an operator
    # resumes once the burn is settled.
    wait_for(
        lambda: node(request, "burn").node_state == NodeState.COMPLETED,
        timeout=90,
        message="the burn was not recovered",
    )
    request.refresh_from_db()
    if request.request_state == RequestState.MANUAL_INTERVENTION:
        intervention_resume(request=request, actor=Actor.for_user(operator), reason="burn on chain")

    def done():
        request.refresh_from_db()
        return request.request_state in (RequestState.COMPLETED, RequestState.FAILED)

    wait_for(done, timeout=120, message="the movement did not finish")

    assert request.request_state == RequestState.COMPLETED
    path = node_path(request, "burn")
    assert path[path.index("SUBMITTING") + 1] == "UNKNOWN"
    assert path.count("SUBMITTING") == 1  # never submitted twice
    assert ChainTransaction.objects.filter(movement=request, node__node_key="burn").count() == 1
    assert a.usdc_balance(treasury) == before_a - UNITS
    assert b.usdc_balance(bob) == before_b + UNITS
    assert len(mints(b, burn_message(request, a).nonce)) == 1
    assert_history_replays(request)

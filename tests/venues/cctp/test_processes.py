"""CCTP through real Celery worker processes and beat on PostgreSQL and a real broker, with
both devchains mining a block a second: a worker SIGKILLed right after broadcasting the burn
leaves one burn and one mint; one SIGKILLed right after broadcasting the mint leaves one mint,
and neither needs a person. The cluster and the killed worker are set up by
:func:`cctp_cluster` and :func:`with_a_worker_killed_at` (the V2 tests use them too)."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from movements.models import MovementRequest
from movements.states import RequestState
from tests.execution.conftest import Cluster, assert_history_replays, node_path, wait_for
from venues.models import ChainTransaction

from .test_cctp_movements import UNITS, burn_message, create, mints

# Real worker processes (slow) on PostgreSQL and a real broker, against the devchains.
PROCESS_TEST_MARKS = [
    pytest.mark.devchain,
    pytest.mark.standin,
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

pytestmark = PROCESS_TEST_MARKS

SETTLED = (RequestState.COMPLETED, RequestState.FAILED, RequestState.MANUAL_INTERVENTION)


@contextmanager
def cctp_cluster(tmp_path, chains_yaml: str, chains) -> Iterator[Cluster]:
    """Beat (no worker yet) on the venues' executors (QTG_VENUES=local) and ``chains_yaml``,
    every chain mining a block a second."""
    for chain in chains:
        chain.set_interval_mining(1)
    running = Cluster(tmp_path, workers=0)
    running.env["QTG_VENUES"] = "local"
    running.env["QTG_CHAINS_CONFIG"] = chains_yaml
    running.start()
    try:
        yield running
    finally:
        running.stop()


def settled(request: MovementRequest, timeout: float = 180) -> MovementRequest:
    def done():
        request.refresh_from_db()
        return request.request_state in SETTLED

    wait_for(done, timeout=timeout, message=f"the movement stayed {request.request_state}")
    return request


def with_a_worker_killed_at(
    cluster: Cluster, point: str, create_movement: Callable[[], MovementRequest]
) -> MovementRequest:
    """The movement created while the only worker SIGKILLs itself at ``point``
    (QTG_EVM_CRASH_AT), then run by a sound worker until it settles."""
    cluster.env["QTG_EVM_CRASH_AT"] = point
    doomed = cluster.start_worker()
    request = create_movement()
    wait_for(lambda: doomed.poll() is not None, timeout=120, message="the worker did not die")
    del cluster.env["QTG_EVM_CRASH_AT"]
    cluster.start_worker()
    return settled(request)


def assert_submitted_once_then_recovered(request: MovementRequest, node_key: str) -> None:
    """The node's lease expired after the crash (UNKNOWN), recovery found its one transaction:
    never submitted twice."""
    path = node_path(request, node_key)
    assert path[path.index("SUBMITTING") + 1] == "UNKNOWN", path
    assert path.count("SUBMITTING") == 1, path
    assert ChainTransaction.objects.filter(movement=request, node__node_key=node_key).count() == 1


@pytest.fixture
def cluster(chains_config, settings, chain_a, chain_b, tmp_path):
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = "venues"
    from qtg.core.venues import provide_venues

    from .conftest import TREASURY

    provide_venues([TREASURY])
    with cctp_cluster(tmp_path, settings.QTG_CHAINS_CONFIG, (chain_a, chain_b)) as running:
        yield running


@pytest.mark.parametrize(
    ("point", "node_key"),
    [
        ("after_broadcast", "burn"),
        ("after_broadcast@arbitrum", "mint"),  # the mint, not the burn
    ],
)
def test_a_worker_killed_after_broadcasting_completes_by_itself_with_one_burn_and_one_mint(
    cluster, cctp, chain_a, chain_b, creator, point, node_key
):
    a, b = cctp
    treasury, bob = chain_a.accounts[1].address, chain_b.accounts[2].address
    a.mint_usdc(treasury, 100 * 10**6)
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)

    request = with_a_worker_killed_at(cluster, point, lambda: create(creator, bob))

    assert request.request_state == RequestState.COMPLETED  # nobody was asked
    assert_submitted_once_then_recovered(request, node_key)
    assert a.usdc_balance(treasury) == before_a - UNITS
    assert b.usdc_balance(bob) == before_b + UNITS
    assert len(mints(b, burn_message(request, a).nonce)) == 1
    assert request.reservation.state == "CONSUMED"
    assert_history_replays(request)

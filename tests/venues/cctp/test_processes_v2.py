"""CCTP V2 through real Celery worker processes and beat on PostgreSQL and a real broker, both
devchains mining a block a second, the Iris stand-in enforcing Circle's API limit (35
requests in a second, else 429 and a 5-minute block):

- three workers poll the attestations of many V2 movements at once through their sweeps, and
  Iris never sees more than 35 requests in a second (the bucket they share in the database);
- a 429 stops every worker asking Iris for the block period it names;
- a worker SIGKILLed right after broadcasting the V2 burn, or the V2 mint, leaves one burn and
  one mint (the mint's recovery keys on the attested message's nonce: ``usedNonces``)."""

import math
from decimal import Decimal

import pytest
from web3.logs import DISCARD

from movements.models import MovementRequest
from movements.states import RequestState
from standins.iris_v2 import RateLimit, RateLimiter
from tests.execution.conftest import assert_history_replays, wait_for
from tests.movements.drive import node
from venues.models import ChainTransaction

from . import test_cctp_v2_movements as v2
from .test_cctp_v2_movements import FAST_BPS, STANDARD_BPS, attested, create, v2_mints
from .test_processes import (
    PROCESS_TEST_MARKS,
    assert_submitted_once_then_recovered,
    cctp_cluster,
    with_a_worker_killed_at,
)

pytestmark = PROCESS_TEST_MARKS

CIRCLE_LIMIT_PER_SECOND = 35
# The V2 deployment, the Iris stand-in with V2 and its rate limit, and the product pointed at
# them: the V2 movement tests' fixtures.
cctp_v2, iris_v2_service, iris, v2_config = v2.cctp_v2, v2.iris_v2_service, v2.iris, v2.v2_config
venues_on, funded, bob = v2.venues_on, v2.funded, v2.bob


@pytest.fixture
def cluster(venues_on, v2_config, settings, chain_a, chain_b, tmp_path):
    with cctp_cluster(tmp_path, settings.QTG_CHAINS_CONFIG, (chain_a, chain_b)) as running:
        yield running


def fee(units: int, template: str) -> int:
    bps = FAST_BPS if template == "cctp_v2_fast" else STANDARD_BPS
    return math.ceil(Decimal(units) * bps / Decimal(10_000))


def v2_served(service) -> list:
    return [s for s in service.served() if s.path.startswith("/v2/")]


def busiest_second(served) -> int:
    times = sorted(s.at for s in served)
    return max((sum(1 for t in times if start <= t < start + 1.0) for start in times), default=0)


def all_settled(requests: list[MovementRequest], timeout: float) -> list[MovementRequest]:
    settled_states = (RequestState.COMPLETED, RequestState.FAILED, RequestState.MANUAL_INTERVENTION)
    ids = [r.pk for r in requests]
    running = MovementRequest.objects.filter(pk__in=ids).exclude(request_state__in=settled_states)
    wait_for(
        lambda: not running.exists(),
        timeout=timeout,
        interval=1,
        message="still running: "
        + str(list(running.values_list("pk", "request_state").distinct())),
    )
    return list(MovementRequest.objects.filter(pk__in=ids).order_by("pk"))


MANY = 16
MANY_AMOUNT = "5.000001"
MANY_UNITS = 5_000_001
SLOW_ATTESTER_CONFIRMATIONS = 60
# Three workers on this two-core machine reach about 5 Iris requests a second, far below
# Circle's 35: the limit is scaled down, on the stand-in and in QTG alike, so that it binds.
SCALED_LIMIT = 3


@pytest.fixture
def scaled_limit(iris, settings, monkeypatch):
    """Iris answers 429 (and blocks for 5 minutes) past 3 requests in a second; QTG's workers
    are told the same limit (``QTG_IRIS_REQUESTS_PER_SECOND``)."""
    monkeypatch.setattr(iris, "rate_limiter", RateLimiter(RateLimit(requests=SCALED_LIMIT)))
    settings.QTG_IRIS_REQUESTS_PER_SECOND = SCALED_LIMIT
    monkeypatch.setenv("QTG_IRIS_REQUESTS_PER_SECOND", str(SCALED_LIMIT))  # the workers'


def test_three_workers_polling_many_v2_attestations_stay_under_the_iris_rate_limit(
    scaled_limit, cluster, iris, funded, cctp, cctp_v2, chain_a, chain_b, bob, creator
):
    """Sixteen V2 transfers (fast and standard) at once, Circle slow to attest them (60
    confirmations), their attestations polled by three worker processes' sweeps every 0.2 s:
    more requests asked for than the limit allows, never more sent (a 429 would block them all
    for 5 minutes: none would complete)."""
    (a, b), (_, b2) = cctp, cctp_v2
    treasury = chain_a.accounts[1].address
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)
    cluster.start_workers(3)
    templates = ["cctp_v2_fast" if i % 2 else "cctp_v2" for i in range(MANY)]
    iris.set_faults(confirmations=SLOW_ATTESTER_CONFIRMATIONS)

    requests = [
        create(creator, bob, template=template, max_fee="0.01", amount=MANY_AMOUNT)
        for template in templates
    ]
    requests = all_settled(requests, timeout=600)

    served = v2_served(iris)
    assert [r.request_state for r in requests] == [RequestState.COMPLETED] * MANY
    assert [s for s in served if s.status == 429] == []
    assert busiest_second(served) <= SCALED_LIMIT <= CIRCLE_LIMIT_PER_SECOND
    polls = [s for s in served if s.path.startswith("/v2/messages/")]
    assert len(polls) >= MANY  # every attestation was asked for
    assert len(cluster.pids()) == 3  # the three workers lived throughout
    # Exact balances: each left the source whole, arrived less its fee, minted once.
    assert a.usdc_balance(treasury) == before_a - MANY * MANY_UNITS
    received = sum(MANY_UNITS - fee(MANY_UNITS, t) for t in templates)
    assert b.usdc_balance(bob) == before_b + received
    for request in requests:
        assert len(v2_mints(b2, attested(request).nonce)) == 1
    span = served[-1].at - served[0].at
    print(
        f"iris: {len(served)} /v2 requests ({len(polls)} message polls) over {span:.1f} s, "
        f"busiest second {busiest_second(served)}"
    )


BLOCK_SECONDS = 8


def test_a_429_stops_every_worker_asking_iris_for_the_block_period(
    cluster, iris, funded, cctp, cctp_v2, chain_a, chain_b, bob, creator
):
    """Iris answers one attestation poll 429 with ``Retry-After: 8``: no worker asks Iris
    anything for those 8 seconds (every one of them reads the block from the shared bucket),
    and the movements then complete."""
    (a, b), _ = cctp, cctp_v2
    treasury = chain_a.accounts[1].address
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)
    cluster.start_workers(3)
    iris.set_faults(rate_limit=True, retry_after=BLOCK_SECONDS, times=1)

    requests = [
        create(creator, bob, template="cctp_v2_fast", max_fee="0.01", amount=MANY_AMOUNT)
        for _ in range(4)
    ]
    requests = all_settled(requests, timeout=300)

    served = v2_served(iris)
    (refused,) = [s for s in served if s.status == 429]
    # A request that had its token before the block may still arrive just after it.
    during = [s for s in served if refused.at + 1.0 < s.at < refused.at + BLOCK_SECONDS - 0.5]
    assert during == []
    assert any(s.at >= refused.at + BLOCK_SECONDS - 0.5 for s in served)  # then asked again
    assert [r.request_state for r in requests] == [RequestState.COMPLETED] * 4
    assert a.usdc_balance(treasury) == before_a - 4 * MANY_UNITS
    assert b.usdc_balance(bob) == before_b + 4 * (MANY_UNITS - fee(MANY_UNITS, "cctp_v2_fast"))


def approve_v2_messenger(chain_a, a, a2) -> None:
    """The treasury's allowance to TokenMessengerV2 in place, so that the first transaction a
    worker broadcasts on the source chain is the burn itself."""
    treasury = chain_a.accounts[1].address
    sent = a.usdc.functions.approve(a2.messenger.address, 2**256 - 1).transact({"from": treasury})
    chain_a.web3.eth.wait_for_transaction_receipt(sent, timeout=30)


def burns_by(a2, treasury: str) -> list:
    logs = a2.messenger.events.DepositForBurn().get_logs(from_block=0)
    return [log for log in logs if log["args"]["depositor"] == treasury]


@pytest.mark.parametrize(
    ("point", "node_key", "template"),
    [
        ("after_broadcast@ethereum", "burn", "cctp_v2"),
        ("after_broadcast@arbitrum", "mint", "cctp_v2_fast"),
    ],
)
def test_a_worker_killed_after_broadcasting_a_v2_transaction_completes_with_one_burn_and_mint(
    cluster, funded, cctp, cctp_v2, chain_a, chain_b, bob, creator, point, node_key, template
):
    (a, b), (a2, b2) = cctp, cctp_v2
    treasury = chain_a.accounts[1].address
    approve_v2_messenger(chain_a, a, a2)
    before_a, before_b = a.usdc_balance(treasury), b.usdc_balance(bob)
    burns_before = len(burns_by(a2, treasury))

    request = with_a_worker_killed_at(
        cluster,
        point,
        lambda: create(creator, bob, template=template, max_fee="0.01", amount=MANY_AMOUNT),
    )

    assert request.request_state == RequestState.COMPLETED, request.failure_reason
    assert_submitted_once_then_recovered(request, node_key)
    assert ChainTransaction.objects.filter(movement=request, node__node_key="burn").count() == 1
    assert len(burns_by(a2, treasury)) == burns_before + 1  # one burn
    nonce = attested(request).nonce
    assert len(v2_mints(b2, nonce)) == 1  # one mint
    assert b2.is_nonce_used(nonce)
    assert a.usdc_balance(treasury) == before_a - MANY_UNITS
    assert b.usdc_balance(bob) == before_b + MANY_UNITS - fee(MANY_UNITS, template)
    receipt = a2.w3.eth.get_transaction_receipt(node(request, "burn").external_ref)
    assert a2.transmitter.events.MessageSent().process_receipt(receipt, errors=DISCARD)
    assert request.reservation.state == "CONSUMED"
    assert_history_replays(request)

"""Money safety with real worker processes, beat, a real broker and PostgreSQL."""

import random
import time

import pytest

from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.services import movement_approve, movement_create
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from reservations.models import Reservation, ReservationState
from tests.execution.conftest import ledger, node_path, wait_for
from tests.execution.test_workers_e2e import create, settled

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


def test_a_venue_call_slower_than_the_lease_keeps_its_lease_while_the_worker_lives(
    cluster, creator
):
    # The lease is 5 s and the reaper runs every 1.5 s in the other workers; the venue takes
    # 12 s to accept the withdrawal. The worker's heartbeat keeps the node SUBMITTING.
    movement = create(creator, faults={"withdraw": "submit_delay:12"})

    movement = settled(movement, timeout=90)

    assert movement.request_state == RequestState.COMPLETED
    path = node_path(movement, "withdraw")
    assert "UNKNOWN" not in path, path
    assert len(ledger("withdraw")) == 1
    assert not MovementEvent.objects.filter(
        request=movement, detail__reason="lease expired"
    ).exists()


LEG_FAULTS = [
    "",
    "",
    "",
    "fail",
    "submit_timeout_landed",
    "submit_timeout_lost",
    "submit_delay:1",
    "delay:1",
]
OBSERVE_FAULTS = ["", "", "", "observe_fail", "reorg"]
SETTLED = (RequestState.COMPLETED, RequestState.FAILED, RequestState.MANUAL_INTERVENTION)


def chaos_movement(
    creator, rng: random.Random, *, leg_faults=LEG_FAULTS, observe_faults=OBSERVE_FAULTS
) -> MovementRequest:
    """An approved split withdrawal with random faults on its legs and its deposit."""
    faults = {
        "withdraw_a": rng.choice(leg_faults),
        "withdraw_b": rng.choice(leg_faults),
        "deposit_observe": rng.choice(observe_faults),
    }
    movement = movement_create(
        template="split_withdraw",
        asset="USDC",
        amount="100.02",
        source="sandbox-exchange-a",
        destination="sandbox-exchange-b",
        params={
            "second_source": "sandbox-exchange-c",
            "sandbox": {k: v for k, v in faults.items() if v},
        },
        actor=Actor.for_user(creator),
    )
    movement_approve(request=movement, actor=Actor.system("tests-approver"))
    return movement


def test_chaos_never_reports_safe_while_money_left(cluster, creator):
    """300 split withdrawals with random faults while workers are SIGKILLed: no movement ends
    FAILED (or CANCELLED and released) after a withdrawal completed, and no reservation is
    released with a completed withdrawal."""
    rng = random.Random(20261201)
    movements = [chaos_movement(creator, rng) for _ in range(300)]

    # A worker is SIGKILLed every 0.5-2 s (and replaced) while the movements run, 15 times.
    kills = 0
    while kills < 15:
        time.sleep(rng.uniform(0.5, 2.0))
        victim = rng.choice(sorted(cluster.pids()))
        cluster.kill(victim)
        cluster.start_worker()
        kills += 1

    wait_for(
        lambda: (
            not MovementRequest.objects.filter(pk__in=[m.pk for m in movements])
            .exclude(request_state__in=SETTLED)
            .exists()
        ),
        timeout=480,
        interval=2,
        message="movements still running: "
        + str(
            MovementRequest.objects.exclude(request_state__in=SETTLED)
            .values_list("request_state", flat=True)
            .distinct()
        ),
    )

    side_effect_done = MovementRequestNode.objects.filter(
        has_side_effect=True, node_state=NodeState.COMPLETED
    ).values_list("request_id", flat=True)
    unsafe_failed = MovementRequest.objects.filter(
        pk__in=side_effect_done,
        request_state__in=(RequestState.FAILED, RequestState.CANCELLED),
    )
    released = Reservation.objects.filter(
        request_id__in=side_effect_done, state=ReservationState.RELEASED
    )
    assert list(unsafe_failed.values_list("pk", "request_state")) == []
    assert list(released.values_list("request_id", flat=True)) == []
    # Each leg's withdrawal happened at most once (idempotency key per attempt).
    withdrawals = ledger("withdraw")
    keys = [(e.venue, e.detail.get("client_key")) for e in withdrawals]
    assert len(keys) == len(set(keys))
    outcomes = dict.fromkeys(SETTLED, 0)
    for state in MovementRequest.objects.filter(pk__in=[m.pk for m in movements]).values_list(
        "request_state", flat=True
    ):
        outcomes[state] += 1
    print(f"chaos: {kills} SIGKILLs, outcomes {outcomes}")

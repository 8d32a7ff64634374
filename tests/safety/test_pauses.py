"""A worker paused (SIGSTOP) inside a submit, past its lease, against real worker processes,
beat, a real broker and PostgreSQL: the fence and the request's lifetime keep recovery from
concluding "never happened" while the paused process may still send its request."""

import os
import signal
import time
from datetime import timedelta

import pytest
from django.db.models import Q
from django.utils import timezone

from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.states import NodeState, RequestState
from reservations.models import Reservation, ReservationState
from tests.execution.conftest import CLUSTER_ENV, ledger, wait_for
from tests.execution.test_workers_e2e import create, settled
from tests.safety.test_processes import SETTLED, chaos_movement

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

VALIDITY = float(CLUSTER_ENV["QTG_SANDBOX_REQUEST_VALIDITY_SECONDS"])


def _pause_the_worker_inside_its_submit(movement) -> tuple[int, MovementRequestNode]:
    """SIGSTOP the worker process that holds ``withdraw`` SUBMITTING (its call let out by the
    fence, the simulated exchange still holding the request)."""
    node = wait_for(
        lambda: MovementRequestNode.objects.filter(
            request=movement,
            node_key="withdraw",
            node_state=NodeState.SUBMITTING,
            fenced_at__isnull=False,
        ).first(),
        timeout=60,
        interval=0.05,
        message="the withdrawal never entered its submit",
    )
    pid = int(node.lease_owner.split(":")[1])
    os.kill(pid, signal.SIGSTOP)
    return pid, node


def _withdrawals_of(node) -> list:
    return ledger("withdraw", detail__client_key=node.idempotency_key)


def _reaped(movement) -> MovementRequestNode:
    return wait_for(
        lambda: MovementRequestNode.objects.filter(
            request=movement, node_key="withdraw", node_state=NodeState.UNKNOWN
        ).first(),
        timeout=60,
        message="the paused worker's node was never reaped",
    )


def _paid(movement) -> list:
    """The withdrawals of every attempt of the movement's ``withdraw`` node."""
    keys = MovementRequestNode.objects.filter(request=movement, node_key="withdraw").values_list(
        "idempotency_key", flat=True
    )
    return ledger("withdraw", detail__client_key__in=list(keys))


# The exchange holds the woken request this long (``submit_stall:2``), then acts on it if it is
# still valid; a second more for the process to be scheduled.
WAKE_SECONDS = 2 + 1


def test_a_worker_paused_inside_submit_past_its_lease_pays_once_and_completes(cluster, creator):
    movement = create(creator, faults={"withdraw": "submit_stall:2"})
    pid, fenced = _pause_the_worker_inside_its_submit(movement)
    fenced = MovementRequestNode.objects.get(pk=fenced.pk)
    valid_until = fenced.fenced_until + timedelta(seconds=VALIDITY)
    try:
        _reaped(movement)  # another worker's sweep took the expired lease: UNKNOWN
        # Recovery asks the exchange: it has no such withdrawal (yet); it will be asked again.
        wait_for(
            lambda: (
                MovementRequestNode.objects.filter(pk=fenced.pk)
                .filter(Q(node_state=NodeState.FAILED) | Q(result__not_found_answers__gte=1))
                .exists()
            ),
            timeout=30,
            message="recovery never asked the exchange",
        )
        # Recovery does not conclude while the paused request may still go out (shown for up
        # to 2 s, waking the worker while its request is still valid).
        spare = (valid_until - timezone.now()).total_seconds() - WAKE_SECONDS
        time.sleep(max(0.0, min(2.0, spare)))
        movement.refresh_from_db()
        assert movement.request_state == RequestState.EXECUTING
        assert _withdrawals_of(fenced) == []
        woke_in_time = timezone.now() + timedelta(seconds=WAKE_SECONDS) < valid_until
    finally:
        os.kill(pid, signal.SIGCONT)  # the paused process wakes and its request goes out

    movement = settled(movement, timeout=90)

    assert movement.request_state == RequestState.COMPLETED
    assert len(_paid(movement)) == 1  # once, whichever attempt paid
    assert Reservation.objects.get(request=movement).state == ReservationState.CONSUMED
    if woke_in_time:
        # The woken request went out; its worker's answer came under a stale lease: kept as
        # evidence, not applied.
        assert len(_withdrawals_of(fenced)) == 1
        assert MovementEvent.objects.filter(request=movement, detail__late_result="submit").exists()
    else:
        # A loaded machine reaped and asked so late that the request woke past its validity:
        # the exchange refused it and a second attempt paid (the next test's case).
        assert _withdrawals_of(fenced) == []


def test_a_request_that_woke_past_its_validity_is_refused_and_a_new_attempt_pays_once(
    cluster, creator
):
    movement = create(creator, faults={"withdraw": "submit_stall:2"})
    pid, fenced = _pause_the_worker_inside_its_submit(movement)
    fenced = MovementRequestNode.objects.get(pk=fenced.pk)
    valid_until = fenced.fenced_until + timedelta(seconds=VALIDITY)
    try:
        # Paused well past the request's validity: by then recovery may prove it never happened.
        wait_for(
            lambda: MovementRequestNode.objects.filter(
                pk=fenced.pk, node_state=NodeState.FAILED
            ).exists(),
            timeout=90,
            message="recovery never concluded",
        )
    finally:
        os.kill(pid, signal.SIGCONT)

    movement = settled(movement, timeout=60)
    time.sleep(3)  # the woken worker acts on its request: the exchange refuses it, expired

    # The lost attempt never paid; only a lost lease had stopped it, so a second attempt (its
    # own key) took its place by itself and paid once.
    assert movement.request_state == RequestState.COMPLETED
    assert _withdrawals_of(fenced) == []
    concluded = MovementEvent.objects.get(node_id=fenced.pk, new_state=NodeState.FAILED)
    assert concluded.created_at >= valid_until
    lost = MovementRequestNode.objects.get(pk=fenced.pk)
    assert lost.last_error.startswith("recovery: the venue has no withdrawal with this key")
    second = MovementRequestNode.objects.get(request=movement, node_key="withdraw", is_current=True)
    assert second.attempt == 2 and len(_withdrawals_of(second)) == 1


CHAOS_LEG_FAULTS = [
    "",
    "",
    "",
    "fail",
    "submit_timeout_landed",
    "submit_timeout_lost",
    "submit_stall:1",
    "submit_stall:2",
    "submit_delay:1",
    "delay:1",
]
CHAOS_OBSERVE_FAULTS = ["", "", "", "observe_fail", "reorg"]
# The planted faults after which a movement may truly need a person while the other leg's
# money moved: the exchange refused a leg, lost its request (not retried by itself) or
# rejected the deposit; or the outcome became ambiguous (a submit timed out, the deposit was
# reorganised: UNKNOWN beside a completed side effect is MANUAL_INTERVENTION by the spec's
# table). Stalls and delays are the system's own to settle.
MAY_NEED_A_PERSON = {
    "fail",
    "submit_timeout_lost",
    "submit_timeout_landed",
    "observe_fail",
    "reorg",
}


def test_chaos_of_kills_and_pauses_never_reports_failed_or_released_for_money_that_moved(
    cluster, creator
):
    """120 split withdrawals with venue faults while three workers are SIGKILLed and paused
    (SIGSTOP, some past their leases) for 60 s: every movement settles within two minutes
    after; none that withdrew money (the exchange's own ledger says so) is FAILED or released;
    a movement waits for a person (MANUAL_INTERVENTION) only for a fault that needs one."""
    import random

    rng = random.Random(20261202)
    movements = [
        chaos_movement(
            creator, rng, leg_faults=CHAOS_LEG_FAULTS, observe_faults=CHAOS_OBSERVE_FAULTS
        )
        for _ in range(120)
    ]
    ids = [m.pk for m in movements]

    paused: dict[int, float] = {}
    kills = pauses = 0
    chaos_until = time.monotonic() + 60
    while time.monotonic() < chaos_until:
        time.sleep(rng.uniform(1, 3))
        for pid, wake_at in list(paused.items()):
            if time.monotonic() >= wake_at:
                os.kill(pid, signal.SIGCONT)
                del paused[pid]
        running = sorted(cluster.pids() - set(paused))
        if len(running) < 2:
            continue
        victim = rng.choice(running)
        if rng.random() < 0.5:
            cluster.kill(victim)
            cluster.start_worker()
            kills += 1
        else:
            os.kill(victim, signal.SIGSTOP)
            paused[victim] = time.monotonic() + rng.uniform(2, 16)
            pauses += 1
    for pid in paused:
        os.kill(pid, signal.SIGCONT)

    wait_for(
        lambda: (
            not MovementRequest.objects.filter(pk__in=ids)
            .exclude(request_state__in=SETTLED)
            .exists()
        ),
        timeout=120,
        interval=2,
        message="movements still running two minutes after the chaos: "
        + str(
            list(
                MovementRequestNode.objects.filter(request_id__in=ids, is_current=True)
                .exclude(node_state__in=("COMPLETED", "FAILED", "SKIPPED", "CANCELLED"))
                .values_list("node_key", "node_state")[:10]
            )
        ),
    )

    settled_after = time.monotonic() - chaos_until
    # The exchange's own ledger: which movements' withdrawals happened.
    keys = {
        entry.detail.get("client_key")
        for entry in ledger("withdraw")
        if entry.detail.get("client_key", "").startswith("qtg-")
    }
    paid = set(
        MovementRequestNode.objects.filter(idempotency_key__in=keys).values_list(
            "request_id", flat=True
        )
    )
    wrongly_failed = MovementRequest.objects.filter(
        pk__in=paid, request_state__in=(RequestState.FAILED, RequestState.CANCELLED)
    )
    wrongly_released = Reservation.objects.filter(
        request_id__in=paid, state=ReservationState.RELEASED
    )
    assert list(wrongly_failed.values_list("pk", "failure_reason")) == []
    assert list(wrongly_released.values_list("request_id", flat=True)) == []
    withdrawals = [(e.venue, e.detail.get("client_key")) for e in ledger("withdraw")]
    assert len(withdrawals) == len(set(withdrawals))  # each attempt paid at most once
    outcomes = dict.fromkeys(SETTLED, 0)
    for state in MovementRequest.objects.filter(pk__in=ids).values_list("request_state", flat=True):
        outcomes[state] += 1
    needing = MovementRequest.objects.filter(
        pk__in=ids, request_state=RequestState.MANUAL_INTERVENTION
    ).values_list("params__sandbox", "failure_reason")
    planted = sum(1 for m in movements if set(m.params["sandbox"].values()) & MAY_NEED_A_PERSON)
    # A kill, or a pause past the lease, leaves at most one call in flight (a worker writes
    # each submit's answer as it comes): the only case a worker's fate makes truly ambiguous.
    unexplained = [
        reason[:160]
        for faults, reason in needing
        if not set((faults or {}).values()) & MAY_NEED_A_PERSON
    ]
    print(
        f"chaos: {kills} SIGKILLs, {pauses} SIGSTOPs, outcomes {outcomes}; "
        f"{len(needing)} MANUAL_INTERVENTION: {len(needing) - len(unexplained)} of the "
        f"{planted} movements with a fault that may need a person, {len(unexplained)} after a "
        f"kill or pause; all settled {settled_after:.0f} s after the chaos"
    )
    assert len(unexplained) <= kills + pauses, unexplained

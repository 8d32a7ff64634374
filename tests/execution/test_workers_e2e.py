"""End to end: real Celery worker processes and beat, a real broker (CELERY_BROKER_URL: Redis or
RabbitMQ in CI) and PostgreSQL. Nothing is called in-process except creating and approving
movements and an operator's release of a manual gate; beat and the workers do the rest."""

from datetime import timedelta

import pytest

from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.services import manual_gate_resume, movement_approve, movement_create
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from tests.execution.conftest import assert_history_replays, ledger, node_path, wait_for
from tests.movements.drive import node

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

SETTLED = {
    RequestState.COMPLETED,
    RequestState.FAILED,
    RequestState.MANUAL_INTERVENTION,
    RequestState.EXPIRED,
    RequestState.WAITING_MANUAL_ACTION,
}


def create(creator, template="cex_to_cex", *, faults=None, approve=True, **extra):
    params = {"sandbox": faults} if faults else {}
    request = movement_create(
        template=template,
        asset="USDC",
        amount="125.50",
        source="sandbox-exchange-a",
        destination="sandbox-exchange-b",
        params=params,
        actor=Actor.for_user(creator),
        **extra,
    )
    if approve:
        movement_approve(request=request, actor=Actor.system("tests-approver"))
    return request


def settled(request, states=SETTLED, timeout=60):
    def check():
        request.refresh_from_db()
        return request.request_state in states

    wait_for(
        check,
        timeout=timeout,
        message=f"request stayed {request.request_state}: "
        f"{dict(request.nodes.values_list('node_key', 'node_state'))}",
    )
    return request


def test_the_cex_lane_reaches_completed_through_the_workers(cluster, creator):
    request = settled(create(creator))

    assert request.request_state == RequestState.COMPLETED
    assert len(ledger("withdraw")) == 1
    assert len(ledger("deposit_credit")) == 1
    assert_history_replays(request)


def test_a_failed_withdraw_ends_failed(cluster, creator):
    request = settled(create(creator, faults={"withdraw": "fail"}))

    assert request.request_state == RequestState.FAILED
    assert ledger("withdraw") == []


def test_a_failed_deposit_after_a_completed_withdraw_ends_in_manual_intervention(cluster, creator):
    request = settled(create(creator, faults={"deposit_observe": "observe_fail"}))

    assert request.request_state == RequestState.MANUAL_INTERVENTION
    assert node(request, "withdraw").node_state == NodeState.COMPLETED
    assert node(request, "deposit_observe").node_state == NodeState.FAILED


def test_a_manual_gate_waits_until_an_operator_resumes_it(cluster, creator, operator):
    request = settled(create(creator, "cex_to_cex_gated"))
    assert request.request_state == RequestState.WAITING_MANUAL_ACTION

    import time

    time.sleep(1.5)  # several ticks: nobody dispatches a manual gate
    request.refresh_from_db()
    assert request.request_state == RequestState.WAITING_MANUAL_ACTION
    assert node(request, "manual_release").node_state == NodeState.READY

    manual_gate_resume(request=request, actor=Actor.for_user(operator))
    request = settled(
        request, {RequestState.COMPLETED, RequestState.FAILED, RequestState.MANUAL_INTERVENTION}
    )

    assert request.request_state == RequestState.COMPLETED


def test_a_submit_timeout_that_landed_completes_through_recovery_with_one_side_effect(
    cluster, creator
):
    request = settled(create(creator, faults={"withdraw": "submit_timeout_landed"}))

    assert request.request_state == RequestState.COMPLETED
    assert node_path(request, "withdraw")[-3:] == ["SUBMITTING", "UNKNOWN", "COMPLETED"]
    assert len(ledger("withdraw")) == 1


def test_a_submit_timeout_that_did_not_land_fails_through_recovery(cluster, creator):
    request = settled(create(creator, faults={"withdraw": "submit_timeout_lost"}))

    assert request.request_state == RequestState.FAILED
    assert node_path(request, "withdraw")[-3:] == ["SUBMITTING", "UNKNOWN", "FAILED"]
    assert ledger("withdraw") == []


def test_an_approval_past_its_expiry_ends_expired(cluster, creator):
    request = create(creator, approve=False, expires_in=timedelta(seconds=1))

    request = settled(request, {RequestState.EXPIRED}, timeout=30)

    assert request.request_state == RequestState.EXPIRED
    assert set(request.nodes.values_list("node_state", flat=True)) == {NodeState.CANCELLED}


def test_several_workers_over_hundreds_of_movements_do_every_side_effect_once(cluster, creator):
    assert len(cluster.pids()) >= 2
    requests = [create(creator) for _ in range(200)]

    wait_for(
        lambda: not MovementRequest.objects.exclude(request_state__in=SETTLED).exists(),
        timeout=240,
        interval=1,
        message="movements still running: "
        + str(MovementRequest.objects.exclude(request_state__in=SETTLED).count()),
    )

    assert set(MovementRequest.objects.values_list("request_state", flat=True)) == {
        RequestState.COMPLETED
    }
    for operation in ("withdraw", "chain_transfer", "deposit_credit"):
        entries = ledger(operation)
        assert len(entries) == len(requests), operation
        assert len({e.reference for e in entries}) == len(requests), operation
    workers = {e.actor_id for e in MovementEvent.objects.filter(actor_id__startswith="worker:")}
    pids = {actor.split(":")[2] for actor in workers}
    assert len(pids) >= 2, "the work was shared by several worker processes"
    for request in requests:
        request.refresh_from_db()
        assert_history_replays(request)


def test_a_worker_killed_while_submitting_leaves_the_node_to_recovery_not_resubmission(
    cluster, creator
):
    # The venue carries the withdrawal out, then takes 60 s to answer: long enough to kill.
    request = create(creator, faults={"withdraw": "submit_delay:60"})
    withdraw = wait_for(
        lambda: (
            MovementRequestNode.objects.filter(
                request=request, node_key="withdraw", node_state=NodeState.SUBMITTING
            ).first()
            if ledger("withdraw")
            else None
        ),
        timeout=30,
    )
    pid = int(withdraw.lease_owner.split(":")[1])
    assert pid in cluster.pids()

    cluster.kill(pid)
    request = settled(request, timeout=60)

    assert request.request_state == RequestState.COMPLETED
    assert node_path(request, "withdraw")[-3:] == ["SUBMITTING", "UNKNOWN", "COMPLETED"]
    assert len(ledger("withdraw")) == 1
    assert node(request, "withdraw").dispatch_count == 1
    reaped = MovementEvent.objects.get(request=request, node_key="withdraw", new_state="UNKNOWN")
    assert reaped.detail["reason"] == "lease expired"
    assert_history_replays(request)

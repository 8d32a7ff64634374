"""The embedded profile (SQLite and the embedded broker, as ``make run`` runs): a worker killed
at any point is a non-event. The restarted worker carries on within one lease, nothing waits
for an operator, and no movement is reported failed for money that moved."""

import os
import signal

import pytest
from django.conf import settings

from movements.models import MovementRequest, MovementRequestNode
from movements.states import NodeState, RequestState
from reservations.models import Reservation, ReservationState
from tests.execution.conftest import Cluster, ledger, wait_for
from tests.execution.test_workers_e2e import create

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SETTLED = (RequestState.COMPLETED, RequestState.FAILED, RequestState.MANUAL_INTERVENTION)


@pytest.fixture
def embedded_cluster(django_db_setup, tmp_path):
    """One worker and beat on the test's SQLite file and kombu's filesystem broker."""
    if settings.DB_IS_POSTGRES:
        pytest.skip("the embedded profile runs on SQLite")
    cluster = Cluster(tmp_path, workers=1)
    cluster.env.pop("DATABASE_URL", None)
    cluster.env["QTG_SQLITE_PATH"] = str(settings.DATABASES["default"]["NAME"])
    cluster.env["CELERY_BROKER_URL"] = "filesystem://"
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.mark.parametrize("killed_in", [NodeState.PREPARING, NodeState.SUBMITTING])
def test_a_killed_embedded_worker_is_replaced_and_its_movements_settle_alone(
    embedded_cluster, creator, killed_in
):
    movements = [create(creator, faults={"withdraw": "submit_stall:1"}) for _ in range(4)] + [
        create(creator) for _ in range(4)
    ]
    ids = [m.pk for m in movements]
    in_hand = wait_for(
        lambda: MovementRequestNode.objects.filter(
            request_id__in=ids, node_key="withdraw", node_state=killed_in
        ).first(),
        timeout=60,
        interval=0.05,
        message=f"no withdrawal was ever {killed_in}",
    )
    victim = int(in_hand.lease_owner.split(":")[1])
    os.kill(victim, signal.SIGKILL)
    embedded_cluster.kill(victim)
    embedded_cluster.start_worker()

    # Within a lease (12 s for a fenced sandbox submit) plus the request's validity (10 s).
    wait_for(
        lambda: (
            not MovementRequest.objects.filter(pk__in=ids)
            .exclude(request_state__in=SETTLED)
            .exists()
        ),
        timeout=60,
        interval=0.5,
        message="movements still waiting after the worker was replaced: "
        + str(
            list(MovementRequest.objects.filter(pk__in=ids).values_list("request_state", flat=True))
        ),
    )

    keys = {entry.detail.get("client_key") for entry in ledger("withdraw")}
    for movement in MovementRequest.objects.filter(pk__in=ids):
        withdraw = movement.nodes.get(node_key="withdraw", is_current=True)
        paid = withdraw.idempotency_key in keys
        reservation = Reservation.objects.get(request=movement)
        # A submit the dead worker never sent is proven absent and retried as a new attempt:
        # every movement completes, nothing waits for an operator.
        assert paid, withdraw
        assert movement.request_state == RequestState.COMPLETED, movement.failure_reason
        assert reservation.state == ReservationState.CONSUMED
    assert len(keys) == len(ledger("withdraw"))  # each withdrawal paid once

"""The reaper runs on every worker: real worker processes reap a dead worker's expired lease on
their own clock, with no beat sending them any message (PostgreSQL, the broker of
CELERY_BROKER_URL)."""

import pytest
from django.utils import timezone

from movements.models import MovementEvent, MovementRequestNode
from movements.services import execution
from movements.states import NodeState
from tests.execution.conftest import CLUSTER_ENV, Cluster, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def workers_without_beat(transactional_db, settings, tmp_path):
    """Two worker processes and no beat: no sweep and no reap message ever reaches them."""
    if not settings.DB_IS_POSTGRES:
        pytest.skip("real worker processes need PostgreSQL")
    cluster = Cluster(tmp_path, workers=2)
    cluster.start_workers(cluster.count)
    yield cluster
    cluster.stop()


def test_every_worker_reaps_a_dead_workers_lease_without_beat(workers_without_beat, make_movement):
    movement = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="dead-worker")
    MovementRequestNode.objects.filter(pk=claim.node_id).update(lease_expires_at=timezone.now())

    reaped = wait_for(
        lambda: MovementEvent.objects.filter(
            node_id=claim.node_id, detail__reason="lease expired"
        ).first(),
        timeout=30,
        message="no worker reaped the expired lease (only beat's messages would have)",
    )

    node = MovementRequestNode.objects.get(pk=claim.node_id)
    assert node.node_state == NodeState.READY and node.request_id == movement.pk
    # One of the worker processes did it, on its own clock (every QTG_REAP_SECONDS).
    component, worker = reaped.actor_id.split("@worker:")
    assert component == "lease-reaper"
    assert int(worker.rsplit(":", 1)[1]) in workers_without_beat.pids()
    interval = min(
        float(CLUSTER_ENV["QTG_TICK_SECONDS"]) * 5, float(CLUSTER_ENV["QTG_LEASE_SECONDS"]) / 4
    )
    # Within a round or so (a loaded machine adds its own delay).
    assert reaped.detail["reap_lag_seconds"] < interval + 10, reaped.detail

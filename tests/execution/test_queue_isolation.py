"""Issue 29's probe with real processes: twenty test deliveries to a slow receiver used to
share the only queue with the movement sweeps and delay the pickup of an approved movement
from about a second to over a hundred. With one queue (and worker) per concern the webhook
worker is busy with them while the venue worker picks the movement up at once."""

import http.server
import threading
import time

import pytest
from django.utils import timezone

from callbacks.models import Delivery, DeliveryStatus, Subscription
from callbacks.services import subscription_send_test
from movements.models import MovementRequestNode
from movements.states import NodeState
from qtg.queues import VENUES, WEBHOOKS, queue_name
from tests.conftest import make_user
from tests.execution.conftest import Cluster, wait_for
from tests.execution.test_workers_e2e import create

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]

SLOW_SECONDS = 3.0
# Twenty deliveries at 3 s each hold one worker for a minute: a pickup behind them would take
# longer than this; one on a worker of its own takes a second or two (more on a loaded machine).
PICKUP_SECONDS = 30


class Slow(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(SLOW_SECONDS)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_receiver():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


@pytest.fixture
def per_concern_cluster(settings, tmp_path):
    """Beat, one worker for the sweeps and the venue calls, one for the webhooks (both solo:
    one task at a time, as on a small machine)."""
    if not settings.DB_IS_POSTGRES:
        pytest.skip("real worker processes need PostgreSQL")
    cluster = Cluster(tmp_path, workers=0)
    # The beat sweep queues due deliveries again after a second (the test process's own
    # queueing goes to its own broker, not the cluster's).
    cluster.env["QTG_CALLBACKS_REQUEUE_AFTER_SECONDS"] = "1"
    cluster.env["QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS"] = "1"
    cluster.env["QTG_CALLBACKS_TIMEOUT_SECONDS"] = str(SLOW_SECONDS + 2)
    cluster.start_worker([cluster.queue, queue_name(cluster.queue, VENUES)])
    cluster.start_worker([queue_name(cluster.queue, WEBHOOKS)])
    cluster.start()
    yield cluster
    cluster.stop()


def test_twenty_slow_test_deliveries_do_not_delay_the_pickup_of_an_approved_movement(
    per_concern_cluster, slow_receiver
):
    # given twenty test deliveries queued for a receiver that takes 3 s to answer each
    owner = make_user("integrator")
    subscription = Subscription.objects.create(
        name="slow", url=slow_receiver, event_types=["request_completed"], owner=owner
    )
    for _ in range(20):
        subscription_send_test(subscription=subscription)
    wait_for(
        lambda: Delivery.objects.filter(subscription=subscription, attempts__gt=0).exists(),
        timeout=30,
        message="the webhook worker never started on the test deliveries",
    )

    # when a movement is approved
    approved_at = timezone.now()
    movement = create(make_user("creator"))

    # then its first node leaves READY within seconds, while the deliveries still queue
    def picked_up():
        return (
            MovementRequestNode.objects.filter(request=movement)
            .exclude(node_state__in=[NodeState.BLOCKED, NodeState.READY])
            .exists()
        )

    wait_for(picked_up, timeout=PICKUP_SECONDS, message="the approved movement was not picked up")
    pickup = (timezone.now() - approved_at).total_seconds()
    waiting = Delivery.objects.filter(subscription=subscription).exclude(
        status=DeliveryStatus.DELIVERED
    )
    assert pickup < PICKUP_SECONDS
    assert waiting.count() > 0, "the deliveries were done already: the probe proved nothing"

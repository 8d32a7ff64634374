"""One queue per concern (qtg/queues.py): webhook deliveries, test deliveries included, never
wait in front of the movement sweeps; test deliveries are rate-limited per client; a delivery
attempt ends by its deadline however slowly the receiver answers (issue 29, item 2)."""

import http.server
import threading
import time
import uuid

import pytest
from celery import current_app
from django.core.cache import cache

from callbacks import signing
from callbacks.models import Subscription
from callbacks.services import _Claim, _post
from qtg.queues import all_queues
from tests.api.conftest import client_for, post_create
from tests.conftest import ALL_MOVEMENT_PERMS, make_user


def routed_queue(task: str) -> str:
    return current_app.amqp.router.route({}, task)["queue"].name


def test_each_concern_is_routed_to_its_own_queue(settings):
    base = settings.CELERY_TASK_DEFAULT_QUEUE

    for task in ("movements.dispatch_ready", "movements.observe_submitted"):
        assert routed_queue(task) == f"{base}.venues"
    for task in ("movements.recover_unknown", "venues.watch_concluded"):
        assert routed_queue(task) == f"{base}.venues"
    assert routed_queue("callbacks.deliver") == f"{base}.webhooks"
    for task in ("movements.reap_leases", "movements.expire_approvals", "callbacks.deliver_due"):
        assert routed_queue(task) == base
    assert routed_queue("ops.refresh_gauges") == base
    assert sorted(settings.QTG_CELERY_QUEUES) == sorted(all_queues(base))


@pytest.mark.django_db
def test_twenty_test_deliveries_in_a_second_are_cut_to_the_client_s_rate(settings):
    settings.QTG_WEBHOOK_TEST_RATE = "5/min"
    cache.clear()  # the throttle counts live in the cache
    user = make_user("integrator", *ALL_MOVEMENT_PERMS)
    client = client_for(user)
    subscription = Subscription.objects.create(
        name="slow", url="http://127.0.0.1:9/hook", event_types=["request_completed"], owner=user
    )

    answers = [
        client.post(f"/api/v1/webhooks/{subscription.pk}/test/").status_code for _ in range(20)
    ]

    assert answers.count(202) == 5
    assert answers.count(429) == 15
    # the client's other calls are not held back by it
    assert post_create(client).status_code == 201


class Trickle(http.server.BaseHTTPRequestHandler):
    """Answers one header byte every 0.3 s for 6 s: never slow enough for a read timeout."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 20:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.3)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client cut the exchange at its deadline: what the test wants

    def log_message(self, *args):
        pass


@pytest.fixture
def trickling_receiver():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def test_a_delivery_attempt_ends_by_its_deadline_whatever_the_receiver_trickles(
    settings, trickling_receiver
):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = True
    settings.QTG_CALLBACKS_TIMEOUT_SECONDS = 2
    settings.QTG_CALLBACKS_DEADLINE_SECONDS = 1
    claim = _Claim(
        delivery_id=uuid.uuid4(),
        event_id=uuid.uuid4(),
        number=1,
        url=trickling_receiver,
        secrets=(signing.new_secret(),),
        event_type="test",
        body=b"{}",
    )

    started = time.monotonic()
    outcome = _post(claim)

    assert time.monotonic() - started < 2.5
    assert not outcome.ok
    assert "deadline" in outcome.error


@pytest.mark.django_db(transaction=True)
def test_a_slow_receiver_holds_back_only_its_own_deliveries(receiver, another_receiver):
    from django.db import connection
    from django.utils import timezone

    from callbacks.models import Delivery, DeliveryStatus
    from callbacks.services import delivery_send, subscription_send_test
    from tests.execution.conftest import wait_for

    slow = Subscription.objects.create(name="slow", url=receiver.url, event_types=["*"])
    fast = Subscription.objects.create(name="fast", url=another_receiver.url, event_types=["*"])
    receiver.answer(200, delay=1.5)
    first = subscription_send_test(subscription=slow)
    second = subscription_send_test(subscription=slow)
    other = subscription_send_test(subscription=fast)

    def send_first():
        try:
            delivery_send(delivery_id=first.pk)
        finally:
            connection.close()

    sending = threading.Thread(target=send_first)
    sending.start()
    wait_for(
        lambda: Delivery.objects.get(pk=first.pk).sending_until is not None,
        timeout=10,
        message="the first attempt never went on the wire",
    )
    on_the_wire_until = Delivery.objects.get(pk=first.pk).sending_until

    # The slow receiver's next delivery waits for its attempt on the wire; another receiver's
    # goes at once.
    assert delivery_send(delivery_id=second.pk) is None
    assert delivery_send(delivery_id=other.pk).status == DeliveryStatus.DELIVERED
    sending.join(timeout=10)

    second.refresh_from_db()
    assert second.attempts == 0 and second.next_attempt_at == on_the_wire_until
    assert Delivery.objects.get(pk=first.pk).status == DeliveryStatus.DELIVERED
    Delivery.objects.filter(pk=second.pk).update(next_attempt_at=timezone.now())
    assert delivery_send(delivery_id=second.pk).status == DeliveryStatus.DELIVERED

"""The transactional outbox: a delivery exists exactly when the state change committed, and
nothing is sent before the commit."""

import json
from unittest import mock

import pytest
from django.db import transaction

from callbacks import tasks
from callbacks.models import Delivery, DeliveryStatus, Event
from callbacks.services import callback_enqueue
from movements.models import MovementRequest
from movements.public import movement_payload
from movements.services import movement_approve
from movements.states import RequestState
from qtg.core.actors import Actor
from qtg.core.contract import CONTRACT_VERSION

APPROVER = Actor.system("tests-approver")


class Boom(Exception):
    pass


@pytest.mark.django_db
def test_a_state_change_that_rolls_back_leaves_no_delivery(make_movement, subscribe, receiver):
    subscribe(receiver.url)
    request = make_movement()

    with pytest.raises(Boom), transaction.atomic():
        movement_approve(request=request, actor=APPROVER)
        approved = Delivery.objects.filter(request=request, event_type="request_approved")
        assert approved.exists()  # written inside...
        raise Boom

    assert not approved.exists()  # ...and gone with it
    request.refresh_from_db()
    assert request.request_state == RequestState.PENDING_APPROVAL
    assert receiver.received == []


@pytest.mark.django_db
def test_nothing_is_queued_until_the_transaction_commits(
    make_movement, subscribe, receiver, django_capture_on_commit_callbacks
):
    subscribe(receiver.url, "request_approved")
    request = make_movement()

    with mock.patch.object(tasks.deliver, "delay") as delay:
        with django_capture_on_commit_callbacks(execute=False) as pending:
            movement_approve(request=request, actor=APPROVER)
            assert Delivery.objects.filter(request=request).count() == 1
        assert delay.call_count == 0
        for callback in pending:
            callback()

    delivery = Delivery.objects.get(request=request)
    delay.assert_called_once_with(str(delivery.pk))


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager_tasks")
def test_a_committed_state_change_always_has_its_delivery_and_it_is_sent_after_commit(
    make_movement, subscribe, receiver
):
    subscription = subscribe(receiver.url, "request_approved", "frontier_advanced")
    request = make_movement()

    movement_approve(request=request, actor=APPROVER)  # commits on its own

    deliveries = Delivery.objects.filter(request=request, subscription=subscription)
    assert sorted(deliveries.values_list("event_type", flat=True)) == [
        "frontier_advanced",
        "request_approved",
    ]
    assert set(deliveries.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}
    assert sorted(r.json["type"] for r in receiver.received) == [
        "frontier_advanced",
        "request_approved",
    ]


@pytest.mark.django_db
def test_only_active_subscriptions_that_want_the_event_get_a_delivery(make_movement, subscribe):
    wants = subscribe("http://127.0.0.1:9/a", "request_approved", name="wants")
    subscribe("http://127.0.0.1:9/b", "request_completed", name="other events")
    subscribe("http://127.0.0.1:9/c", "request_approved", name="paused", is_active=False)
    request = make_movement()

    movement_approve(request=request, actor=APPROVER)

    approved = Delivery.objects.filter(event_type="request_approved")
    assert list(approved.values_list("subscription", flat=True)) == [wants.pk]


@pytest.mark.django_db
def test_one_event_to_several_receivers_shares_an_event_id_with_distinct_delivery_ids(
    make_movement, subscribe
):
    subscribe("http://127.0.0.1:9/a", "request_approved", name="a")
    subscribe("http://127.0.0.1:9/b", "request_approved", name="b")
    request = make_movement()

    first, second = callback_enqueue(request=request, event_type="request_approved", data={})

    assert first.event_id == second.event_id
    assert first.pk != second.pk
    assert Delivery.objects.filter(event_id=first.event_id).count() == 2


@pytest.mark.django_db
def test_an_unknown_event_type_is_refused_and_writes_nothing(make_movement, subscribe):
    subscribe("http://127.0.0.1:9/a")
    request = make_movement()
    before = Delivery.objects.count()

    with pytest.raises(ValueError, match="unknown callback event type"):
        callback_enqueue(request=request, event_type="request_exploded")

    assert Delivery.objects.count() == before


@pytest.mark.django_db
def test_the_body_is_the_movement_as_the_api_shows_it_with_its_sequence(
    make_movement, subscribe, client
):
    subscribe("http://127.0.0.1:9/a", "frontier_advanced")
    request = make_movement()

    movement_approve(request=request, actor=APPROVER)

    delivery = Delivery.objects.get()
    body = json.loads(delivery.body)
    assert set(body) == {"id", "type", "timestamp", "version", "data", "context"}
    assert body["id"] == str(delivery.event_id)
    assert body["type"] == "frontier_advanced"
    assert body["version"] == CONTRACT_VERSION
    assert body["timestamp"] == delivery.occurred_at.isoformat().replace("+00:00", "Z")
    data = dict(body["data"])
    sequence = data.pop("sequence")
    # Exactly the detail shape of GET /api/v1/movements/{id}/, as the movement was then.
    request = MovementRequest.objects.get(pk=request.pk)
    assert data == json.loads(json.dumps(movement_payload(request)))
    assert data["request_state"] == "APPROVED"
    assert data["current_frontier"] == ["withdraw"]
    assert body["context"]["woken"] == ["withdraw"]
    event = Event.objects.get(event_id=delivery.event_id)
    assert sequence == event.sequence
    # Creation's events, then request_approved came first: sequences count the movement's
    # events.
    assert list(
        Event.objects.filter(request=request)
        .order_by("sequence")
        .values_list("event_type", "sequence")
    ) == [
        ("request_created", 1),
        ("approval_pending", 2),
        ("request_approved", 3),
        ("frontier_advanced", 4),
    ]

"""The delivery tasks: stable names, thin wrappers, and a sweep that only queues."""

from datetime import timedelta
from unittest import mock

import pytest
from django.conf import settings
from django.utils import timezone

from callbacks import tasks
from callbacks.models import Delivery, DeliveryStatus
from callbacks.services import callback_enqueue
from qtg.celery import app as celery_app


def test_the_task_names_are_pinned_and_the_sweep_is_scheduled():
    assert tasks.deliver.name == "callbacks.deliver"
    assert tasks.deliver_due.name == "callbacks.deliver_due"
    assert {"callbacks.deliver", "callbacks.deliver_due"} <= set(celery_app.tasks)
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "callbacks.deliver_due" in scheduled


@pytest.mark.django_db
@pytest.mark.parametrize("delivery_id", ["8a0b6a56-3f5c-4f3e-9d43-2b1d0c5e9f10", "not-a-uuid"])
def test_the_deliver_task_returns_quietly_when_the_delivery_is_gone(delivery_id):
    assert tasks.deliver(delivery_id) is None


@pytest.fixture
def due(make_movement, subscribe, receiver):
    subscribe(receiver.url, "request_approved")
    [delivery] = callback_enqueue(request=make_movement(), event_type="request_approved")
    return delivery


@pytest.mark.django_db
def test_the_sweep_queues_what_is_due_and_sends_nothing_itself(
    due, receiver, django_capture_on_commit_callbacks
):
    Delivery.objects.filter(pk=due.pk).update(enqueued_at=None)

    with (
        mock.patch.object(tasks.deliver, "delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        queued = tasks.deliver_due()

    assert queued == 1
    delay.assert_called_once_with(str(due.pk))
    assert receiver.received == []


@pytest.mark.django_db
def test_the_sweep_leaves_a_freshly_queued_delivery_to_its_task_and_requeues_a_lost_one(
    due, settings, django_capture_on_commit_callbacks
):
    settings.QTG_CALLBACKS_REQUEUE_AFTER_SECONDS = 120

    with (
        mock.patch.object(tasks.deliver, "delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        fresh = tasks.deliver_due()
        Delivery.objects.filter(pk=due.pk).update(
            enqueued_at=timezone.now() - timedelta(seconds=121)
        )
        lost = tasks.deliver_due()

    assert (fresh, lost) == (0, 1)
    delay.assert_called_once_with(str(due.pk))


@pytest.mark.django_db
def test_the_sweep_skips_deliveries_not_yet_due_or_finished(
    due, django_capture_on_commit_callbacks
):
    later = Delivery.objects.filter(pk=due.pk)
    later.update(enqueued_at=None, next_attempt_at=timezone.now() + timedelta(minutes=5))

    with (
        mock.patch.object(tasks.deliver, "delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        not_due = tasks.deliver_due()
        later.update(next_attempt_at=timezone.now(), status=DeliveryStatus.DEAD)
        dead = tasks.deliver_due()

    assert (not_due, dead) == (0, 0)
    delay.assert_not_called()


@pytest.mark.django_db
def test_a_duplicate_task_for_a_delivered_delivery_sends_nothing(due, receiver):
    tasks.deliver(str(due.pk))

    tasks.deliver(str(due.pk))  # a duplicate task for the same row

    assert len(receiver.received) == 1
    assert Delivery.objects.get(pk=due.pk).attempts == 1


@pytest.mark.django_db
def test_a_broker_outage_when_queueing_leaves_the_delivery_to_the_sweep(
    make_movement, subscribe, django_capture_on_commit_callbacks
):
    subscribe("http://127.0.0.1:9/hook", "request_approved")
    request = make_movement()

    with (
        mock.patch.object(tasks.deliver, "delay", side_effect=ConnectionError("broker down")),
        django_capture_on_commit_callbacks(execute=True),
    ):
        [delivery] = callback_enqueue(request=request, event_type="request_approved")

    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.PENDING
    window = timedelta(seconds=settings.QTG_CALLBACKS_REQUEUE_AFTER_SECONDS)
    Delivery.objects.filter(pk=delivery.pk).update(enqueued_at=timezone.now() - window)
    with (
        mock.patch.object(tasks.deliver, "delay") as delay,
        django_capture_on_commit_callbacks(execute=True),
    ):
        tasks.deliver_due()
    delay.assert_called_once_with(str(delivery.pk))

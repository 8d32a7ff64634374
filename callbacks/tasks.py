"""Celery tasks for webhook delivery: thin wrappers over callbacks.services (names are stable:
the beat schedule and queued messages refer to them)."""

from celery import shared_task

from callbacks.services import (
    DELIVER_TASK,
    deliveries_enqueue_due,
    delivery_send,
    events_publish,
)


@shared_task(name=DELIVER_TASK, ignore_result=True, soft_time_limit=60, time_limit=90)
def deliver(delivery_id: str) -> None:
    """One attempt at one delivery (returns quietly when it is not due or gone)."""
    delivery_send(delivery_id=delivery_id)


@shared_task(name="callbacks.deliver_due", ignore_result=True, soft_time_limit=60, time_limit=90)
def deliver_due() -> int:
    """Publish committed events to the feed (those whose own publish was lost), then queue a
    delivery task for everything due; never sends anything itself."""
    events_publish()
    return deliveries_enqueue_due()

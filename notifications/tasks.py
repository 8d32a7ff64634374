"""Celery tasks of the notifications: thin wrappers over notifications.services (names are
stable: the beat schedule and queued messages refer to them)."""

from celery import shared_task

from notifications.services import (
    SEND_TASK,
    digests_send,
    notification_send,
    notifications_enqueue_due,
)


@shared_task(name=SEND_TASK, ignore_result=True, soft_time_limit=60, time_limit=90)
def send(notification_id: str) -> None:
    """One attempt at one notification (returns quietly when it is not due or gone)."""
    notification_send(notification_id=notification_id)


@shared_task(name="notifications.send_due", ignore_result=True, soft_time_limit=60, time_limit=90)
def send_due() -> int:
    """Queue a send task for every notification due (those whose own task was lost)."""
    return notifications_enqueue_due()


@shared_task(name="notifications.digest", ignore_result=True, soft_time_limit=120, time_limit=180)
def digest() -> int:
    """One digest email per person with notifications waiting for the digest."""
    return digests_send()

"""The moving parts of a transactional outbox, shared by webhook deliveries (``callbacks``) and
operator notifications (``notifications``).

An outbox row is written in the transaction of the event it tells. Once that transaction
commits, one task per row is queued (never before: a rolled-back event sends nothing); the task
claims the row, sends it outside any transaction, and records the outcome: sent, a retry after
an exponential backoff, or dead after a number of attempts. A periodic sweep queues again what
is due and whose task was lost with its broker message; it never sends. The rows carry
``status`` (PENDING while there is something to send), ``next_attempt_at`` and
``enqueued_at``; each outbox keeps its own claim and record (what it sends differs).
"""

import logging
import random
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from celery import current_app
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

logger = logging.getLogger(__name__)


def backoff_delay(attempts: int, *, base: float, cap: float) -> timedelta:
    """How long to wait after the ``attempts``-th failed attempt: ``base * 2**(attempts-1)``
    seconds, capped at ``cap``, with a little jitter so receivers that come back are not hit
    by every retry at once."""
    delay = min(base * (2 ** max(attempts - 1, 0)), cap)
    return timedelta(seconds=delay * random.uniform(1.0, 1.1))


def queue(task_name: str, ids: Iterable[Any]) -> None:
    """Ask for one ``task_name`` task per row; a broker hiccup is left to the sweep."""
    # By its stable name (registered when the app is ready): the tasks import the services,
    # never the other way round.
    task = current_app.tasks[task_name]
    for pk in ids:
        try:
            task.delay(str(pk))
        except Exception:
            logger.warning("could not queue %s %s; the sweep will", task_name, pk, exc_info=True)


def queue_after_commit(task_name: str, ids: Iterable[Any]) -> None:
    """``queue`` once the caller's transaction commits (nothing if it rolls back)."""
    ids = list(ids)
    if ids:
        transaction.on_commit(lambda: queue(task_name, ids))


def enqueue_due(
    due: models.QuerySet, *, task_name: str, requeue_after: float, limit: int = 500
) -> int:
    """Queue a ``task_name`` task for every row of ``due`` (the outbox's PENDING rows it may
    send now) that is due and not queued recently (a task lost with its broker message is
    queued again); return how many."""
    now = timezone.now()
    requeue_before = now - timedelta(seconds=requeue_after)
    model = due.model
    with transaction.atomic():
        ids = list(
            due.select_for_update(skip_locked=True, of=("self",))
            .filter(next_attempt_at__lte=now)
            .filter(Q(enqueued_at__isnull=True) | Q(enqueued_at__lte=requeue_before))
            .order_by("next_attempt_at")
            .values_list("pk", flat=True)[:limit]
        )
        if ids:
            model.objects.filter(pk__in=ids).update(enqueued_at=now)
            queue_after_commit(task_name, ids)
    return len(ids)

"""Each periodic task that finishes on a worker stamps its ``SweepHeartbeat`` row (at most
every ``QTG_HEARTBEAT_WRITE_SECONDS`` per task and process, so a 2-second tick does not
become a write every 2 seconds)."""

import logging
import socket
import time
from datetime import datetime

from celery.signals import task_postrun
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from ops.models import SweepHeartbeat

logger = logging.getLogger(__name__)
_last_written: dict[str, float] = {}


def periodic_tasks() -> set[str]:
    """The task names beat sends (``CELERY_BEAT_SCHEDULE``)."""
    return {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}


def record_sweep(*, task: str, at: datetime | None = None) -> None:
    """Stamp ``task``'s heartbeat."""
    SweepHeartbeat.objects.update_or_create(
        task=task, defaults={"last_run_at": at or timezone.now(), "worker": socket.gethostname()}
    )


def last_sweep_at() -> datetime | None:
    """When any periodic task last finished on a worker (None: never)."""
    latest = SweepHeartbeat.objects.order_by("-last_run_at").first()
    return latest.last_run_at if latest else None


def _on_task_postrun(sender=None, **kwargs) -> None:
    name = getattr(sender, "name", "")
    if name not in periodic_tasks():
        return
    now = time.monotonic()
    if now - _last_written.get(name, float("-inf")) < settings.QTG_HEARTBEAT_WRITE_SECONDS:
        return
    try:
        record_sweep(task=name)
    except DatabaseError:
        # The heartbeat is evidence, not work: a failed stamp must not fail the sweep. Its
        # age will show the problem on /health/.
        logger.warning("could not stamp the heartbeat of %s", name, exc_info=True)
        return
    _last_written[name] = now


def connect() -> None:
    task_postrun.connect(_on_task_postrun, weak=False, dispatch_uid="qtg-sweep-heartbeat")

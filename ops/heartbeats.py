"""Each periodic task that finishes on a worker stamps its ``SweepHeartbeat`` row (at most
every ``QTG_HEARTBEAT_WRITE_SECONDS`` per task and process, so a 2-second tick does not
become a write every 2 seconds), and each running worker stamps its ``WorkerHeartbeat`` row
(its queues) every ``QTG_HEARTBEAT_WRITE_SECONDS`` from a thread of its main process, so
readiness counts the workers per queue from the database, without a broker round trip."""

import logging
import os
import socket
import threading
import time
from datetime import datetime, timedelta

from celery.signals import task_postrun, worker_ready, worker_shutdown
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from ops.models import SweepHeartbeat, WorkerHeartbeat

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


def record_worker(*, hostname: str, queues: list[str], at: datetime | None = None) -> None:
    """Stamp the heartbeat of the worker ``hostname`` serving ``queues``."""
    WorkerHeartbeat.objects.update_or_create(
        hostname=hostname,
        defaults={
            "queues": sorted(queues),
            "pid": os.getpid(),
            "last_seen_at": at or timezone.now(),
        },
    )


def workers_by_queue(*, max_age: float, now: datetime | None = None) -> dict[str, list[str]]:
    """The workers seen within ``max_age`` seconds, by the queue they consume."""
    since = (now or timezone.now()) - timedelta(seconds=max_age)
    found: dict[str, list[str]] = {}
    for hostname, queues in WorkerHeartbeat.objects.filter(last_seen_at__gte=since).values_list(
        "hostname", "queues"
    ):
        for queue in queues:
            found.setdefault(queue, []).append(hostname)
    return found


_stop_worker_heartbeat = threading.Event()


def _worker_heartbeat_loop(hostname: str, queues: list[str]) -> None:
    interval = max(1.0, settings.QTG_HEARTBEAT_WRITE_SECONDS)
    while True:
        try:
            record_worker(hostname=hostname, queues=queues)
        except DatabaseError:
            logger.warning("could not stamp the heartbeat of worker %s", hostname, exc_info=True)
            connection.close()
        if _stop_worker_heartbeat.wait(interval):
            break
    try:
        WorkerHeartbeat.objects.filter(hostname=hostname, pid=os.getpid()).delete()
    except DatabaseError:
        pass
    finally:
        connection.close()


def _on_worker_ready(sender=None, **kwargs) -> None:
    hostname = getattr(sender, "hostname", "") or socket.gethostname()
    app = getattr(sender, "app", None)
    queues = list(app.amqp.queues.consume_from) if app is not None else []
    _stop_worker_heartbeat.clear()
    threading.Thread(
        target=_worker_heartbeat_loop,
        args=(hostname, queues or [settings.CELERY_TASK_DEFAULT_QUEUE]),
        name="qtg-worker-heartbeat",
        daemon=True,
    ).start()


def _on_worker_shutdown(sender=None, **kwargs) -> None:
    _stop_worker_heartbeat.set()


def connect() -> None:
    task_postrun.connect(_on_task_postrun, weak=False, dispatch_uid="qtg-sweep-heartbeat")
    worker_ready.connect(_on_worker_ready, weak=False, dispatch_uid="qtg-worker-heartbeat")
    worker_shutdown.connect(_on_worker_shutdown, weak=False, dispatch_uid="qtg-worker-stop")

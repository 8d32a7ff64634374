"""Celery task metrics, kept by every worker and publisher through Celery's signals: how long a
task waited in its queue (stamped when published, read when it starts), how long it ran and
how it ended, and each worker process's resident memory."""

import os
import time

from celery.signals import before_task_publish, task_postrun, task_prerun
from prometheus_client import Gauge, Histogram

PUBLISHED_AT = "qtg_published_at"

QUEUE_WAIT_SECONDS = Histogram(
    "qtg_task_queue_wait_seconds",
    "From a task's publication to a worker starting it (how far the workers are behind).",
    ["task"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
RUN_SECONDS = Histogram(
    "qtg_task_seconds",
    "How long a task ran on its worker, by task and final state.",
    ["task", "state"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
WORKER_MEMORY = Gauge(
    "qtg_worker_resident_memory_bytes",
    "Resident memory of a worker process, as of its last task.",
    ["pid"],
    multiprocess_mode="liveall",
)

_started: dict[str, float] = {}
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _on_publish(sender=None, headers=None, **kwargs) -> None:
    if isinstance(headers, dict):
        headers.setdefault(PUBLISHED_AT, time.time())


def _published_at(task) -> float | None:
    request = getattr(task, "request", None)
    value = getattr(request, PUBLISHED_AT, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(PUBLISHED_AT)
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _on_prerun(task_id=None, task=None, **kwargs) -> None:
    now = time.time()
    _started[str(task_id)] = time.perf_counter()
    published = _published_at(task)
    if published is not None and task is not None:
        QUEUE_WAIT_SECONDS.labels(task.name).observe(max(0.0, now - published))


def _on_postrun(task_id=None, task=None, state=None, **kwargs) -> None:
    started = _started.pop(str(task_id), None)
    if started is not None and task is not None:
        RUN_SECONDS.labels(task.name, str(state or "UNKNOWN")).observe(
            time.perf_counter() - started
        )
    resident = _resident_bytes()
    if resident is not None:
        WORKER_MEMORY.labels(str(os.getpid())).set(resident)


def connect() -> None:
    before_task_publish.connect(_on_publish, weak=False, dispatch_uid="qtg-task-published")
    task_prerun.connect(_on_prerun, weak=False, dispatch_uid="qtg-task-prerun")
    task_postrun.connect(_on_postrun, weak=False, dispatch_uid="qtg-task-postrun")

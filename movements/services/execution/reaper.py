"""The reaper on every worker: each Celery worker process reaps expired leases itself, every
``QTG_REAP_SECONDS``, from a thread of its own.

Beat's ``movements.reap_leases`` and the reaping at the start of every sweep both wait for a
message: behind a worker's backlog, behind a solo pool's long venue call, or behind a broker
that holds the message for a paused consumer. The nodes of a dead or paused worker must move on
within about a lease however late those messages are, so every worker also reaps on a clock.
Any number of reapers may run at once: each moves a node only under its row lock, after
reading its lease again, and skips a row another holds (``leases.reap_expired_leases``). How
late each came to a lease is measured (``qtg_reap_lag_seconds``).
"""

import logging
import threading

from django.conf import settings
from django.db import connection

from movements.services.execution.leases import reap_expired_leases
from qtg.core.actors import Actor

logger = logging.getLogger(__name__)


class Reaper:
    """A daemon thread that reaps every ``interval`` seconds until stopped."""

    def __init__(self, interval: float | None = None) -> None:
        self.interval = float(interval if interval is not None else settings.QTG_REAP_SECONDS)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Reaper":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="qtg-lease-reaper", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                try:
                    reap_expired_leases(actor=Actor.sweep("lease-reaper"))
                except Exception:
                    # The next round tries again (another worker's may come first); a lost
                    # connection is opened afresh.
                    logger.warning("the worker's lease reaper failed", exc_info=True)
                    connection.close()
        finally:
            connection.close()  # this thread's own connection


_reaper: Reaper | None = None


def _on_worker_ready(sender=None, **kwargs) -> None:
    global _reaper
    if _reaper is None and settings.QTG_REAP_SECONDS > 0:
        _reaper = Reaper().start()


def _on_worker_shutdown(sender=None, **kwargs) -> None:
    global _reaper
    if _reaper is not None:
        _reaper.stop(timeout=5)
        _reaper = None


def connect() -> None:
    """Start a reaper in every worker process once it is ready (Celery's signals)."""
    from celery.signals import worker_ready, worker_shutdown

    worker_ready.connect(_on_worker_ready, weak=False, dispatch_uid="qtg-lease-reaper")
    worker_shutdown.connect(_on_worker_shutdown, weak=False, dispatch_uid="qtg-lease-reaper-stop")

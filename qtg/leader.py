"""One leader per role among any number of candidates, through a lease row in the database
(``ops.LeaderLease``; the database is the one thing every process shares, SQLite or
PostgreSQL alike).

``hold(name, holder, ttl)`` takes the lease when it is free or expired, renews it when
``holder`` already has it, and says whether ``holder`` leads now. Each step is one UPDATE
whose WHERE re-checks the holder or the expiry, so two candidates never both win (PostgreSQL
re-evaluates the WHERE after the row lock; SQLite serialises writers). A leader that stops
renewing (killed, paused, cut off) loses the role when its lease expires; ``release`` hands it
over at once on a clean stop. Times are this process's clock: keep ``ttl`` well above the
clock skew between machines.

:class:`LeaderScheduler` is Celery beat's scheduler with such a lease (``beat``): run beat on
several machines (``CELERY_BEAT_SCHEDULER`` names it for every beat); only the leader sends
the periodic sweeps, the others check each tick and take over within one lease
(``QTG_SCHEDULER_LEASE_SECONDS``) of the leader's death. For a tick or so around a
hand-over two beats may both send: the sweeps are safe to run twice (claims skip locked rows,
every transition is a compare-and-set).
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta

from celery.beat import PersistentScheduler
from django.apps import apps
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

logger = logging.getLogger(__name__)


def _lease_model():
    # Looked up, not imported: the lease table belongs to the ops app, above every app that
    # may want a leader (movements included).
    return apps.get_model("ops", "LeaderLease")


def candidate_id() -> str:
    """This process as a lease holder: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def hold(name: str, holder: str, ttl: float) -> bool:
    """Take or renew the lease ``name`` for ``holder`` until now + ``ttl`` seconds; True when
    ``holder`` leads now."""
    lease = _lease_model()
    now = timezone.now()
    until = now + timedelta(seconds=ttl)
    leases = lease.objects.filter(name=name)
    if leases.filter(holder=holder, expires_at__gt=now).update(expires_at=until, renewed_at=now):
        return True
    if leases.filter(expires_at__lte=now).update(
        holder=holder, expires_at=until, acquired_at=now, renewed_at=now
    ):
        logger.info("%s took the %s lease", holder, name)
        return True
    try:
        with transaction.atomic():
            lease.objects.create(
                name=name, holder=holder, expires_at=until, acquired_at=now, renewed_at=now
            )
    except IntegrityError:
        return False  # someone else holds it
    logger.info("%s took the %s lease", holder, name)
    return True


def release(name: str, holder: str) -> None:
    """Give the lease up now (a clean stop), if ``holder`` has it."""
    _lease_model().objects.filter(name=name, holder=holder).update(expires_at=timezone.now())


def current(name: str):
    """The lease row (holder, expiry), or None."""
    return _lease_model().objects.filter(name=name).first()


class LeaderScheduler(PersistentScheduler):
    """Celery beat that sends only while it holds the ``beat`` lease."""

    lease_name = "beat"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.holder = candidate_id()
        self.leading = False

    @property
    def lease_seconds(self) -> float:
        from django.conf import settings

        return settings.QTG_SCHEDULER_LEASE_SECONDS

    def _check_lease(self) -> bool:
        try:
            leading = hold(self.lease_name, self.holder, self.lease_seconds)
        except DatabaseError:
            logger.warning("beat: cannot reach the database for the lease", exc_info=True)
            connection.close()  # a fresh one next tick
            leading = False
        if leading != self.leading:
            logger.info(
                "beat %s %s", self.holder, "leads: sending sweeps" if leading else "stands by"
            )
            self.leading = leading
        return leading

    def tick(self, *args, **kwargs):
        if not self._check_lease():
            # Ask again well before the leader's lease could have run out.
            return min(self.max_interval, self.lease_seconds / 3)
        # Renew at least three times per lease, whatever the schedule's next entry.
        return min(super().tick(*args, **kwargs), self.lease_seconds / 3)

    def close(self):
        if self.leading:
            try:
                release(self.lease_name, self.holder)
            except DatabaseError:
                logger.warning("beat: could not release the lease", exc_info=True)
        super().close()

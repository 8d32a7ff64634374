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

import contextlib
import logging
import os
import socket
import time
from datetime import timedelta

from celery.beat import PersistentScheduler
from django.apps import apps
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone
from kombu.exceptions import ChannelError
from kombu.transport import virtual

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
    """Celery beat that sends only while it holds the ``beat`` lease, and that does not pile
    sweeps into a queue its workers are not keeping up with.

    Beat sends each sweep every interval whatever the workers do with them. A worker that
    falls behind (a loaded machine, its peer paused holding messages) faces a queue that grows
    by every tick's sweeps; each expires unread after a few intervals (``expires``), so the
    queue's front is mostly the frequent ones (dispatch and observe, every tick) and the rare
    ones (recovery, every fifth tick) can expire in it time after time: UNKNOWN nodes waited
    tens of seconds for a recovery that was sent every 1.5 s. So while a queue holds
    ``QTG_SWEEP_BACKLOG`` messages or more, a sweep whose last message may still be waiting
    there (sent less than its ``expires`` ago) is not sent again: the queue then holds about
    one of each sweep, and each is run before it expires. Any one sweep message does the whole
    job (a sweep takes whatever is due when it runs), so nothing is lost by not sending a copy.
    """

    lease_name = "beat"
    # How long one reading of the queues' depths serves: a tick sends its due entries one
    # after another within milliseconds.
    depth_seconds = 0.2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.holder = candidate_id()
        self.leading = False
        self._lease_checked_at = float("-inf")
        self._sent_at: dict[str, float] = {}
        self._depths: dict[str, int] = {}
        self._depths_read_at = float("-inf")
        self._depth_channel = None
        self.coalesced = 0  # sweeps not sent because one was still waiting

    def apply_entry(self, entry, producer=None):
        if self._still_waiting(entry):
            self.coalesced += 1
            logger.debug("beat: %s not sent, one is still waiting in its queue", entry.name)
            return
        super().apply_entry(entry, producer=producer)
        self._sent_at[entry.name] = time.monotonic()

    def _still_waiting(self, entry) -> bool:
        from django.conf import settings

        expires = (entry.options or {}).get("expires")
        sent_at = self._sent_at.get(entry.name)
        if expires is None or sent_at is None or time.monotonic() - sent_at >= expires:
            return False
        return self._depth(self._queue_of(entry)) >= settings.QTG_SWEEP_BACKLOG

    def _queue_of(self, entry) -> str:
        """The queue the app's routes send ``entry``'s task to."""
        options = self.app.amqp.router.route(
            dict(entry.options or {}), entry.task, entry.args, entry.kwargs
        )
        queue = options.get("queue") or self.app.conf.task_default_queue
        return getattr(queue, "name", queue)

    def _depth(self, queue: str) -> int:
        """Messages ready in ``queue`` (0 when the broker cannot say: then beat sends)."""
        now = time.monotonic()
        if now - self._depths_read_at >= self.depth_seconds:
            self._depths, self._depths_read_at = {}, now
        if queue not in self._depths:
            self._depths[queue] = self._read_depth(queue)
        return self._depths[queue]

    def _read_depth(self, queue: str) -> int:
        try:
            # A channel of its own, kept while it works: a broker that closes it (an unknown
            # queue) leaves the producer's alone, and the next reading opens another.
            if self._depth_channel is None:
                self._depth_channel = self.producer.connection.channel()
            return int(self._depth_channel.queue_declare(queue=queue, passive=True)[1])
        except Exception as exc:
            if isinstance(exc, ChannelError) and isinstance(self._depth_channel, virtual.Channel):
                # Redis keeps no empty queue (a list without items is no key), so its passive
                # declare says an empty queue does not exist; the channel is as good as before
                # (only AMQP closes it). Reopening it took a new connection at every reading.
                return 0
            logger.debug("beat: the depth of %s could not be read", queue, exc_info=True)
            channel, self._depth_channel = self._depth_channel, None
            if channel is not None:
                with contextlib.suppress(Exception):
                    channel.close()
            return 0

    @property
    def lease_seconds(self) -> float:
        from django.conf import settings

        return settings.QTG_SCHEDULER_LEASE_SECONDS

    def _check_lease(self) -> bool:
        # Beat calls tick() once per entry it sends: the lease is written (a commit, so a WAL
        # flush on PostgreSQL) a few times per lease, not once per message, or beat on a busy
        # database sends only as fast as it can commit.
        now = time.monotonic()
        if self.leading and now < self._lease_checked_at + self.lease_seconds / 3:
            return True
        self._lease_checked_at = now
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

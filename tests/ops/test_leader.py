"""One leader per role through a database lease (qtg/leader.py): beat on several machines, one
sending; another takes over when the leader stops renewing."""

import contextlib
import time
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from kombu import Queue

from ops.models import LeaderLease
from qtg import leader


@pytest.mark.django_db
def test_one_candidate_leads_the_others_stand_by_until_its_lease_runs_out():
    assert leader.hold("beat", "a", ttl=30)
    assert not leader.hold("beat", "b", ttl=30)
    assert leader.hold("beat", "a", ttl=30)  # renewing

    LeaderLease.objects.filter(name="beat").update(expires_at=timezone.now() - timedelta(seconds=1))

    assert leader.hold("beat", "b", ttl=30)
    assert not leader.hold("beat", "a", ttl=30)  # the old leader cannot renew what it lost
    assert leader.current("beat").holder == "b"


@pytest.mark.django_db
def test_a_released_lease_is_taken_at_once_and_roles_are_independent():
    assert leader.hold("beat", "a", ttl=30)
    assert leader.hold("reaper", "b", ttl=30)

    leader.release("beat", "a")
    leader.release("beat", "b")  # not its lease: nothing happens

    assert leader.hold("beat", "c", ttl=30)
    assert leader.current("reaper").holder == "b"


def _recording_scheduler(app, monkeypatch, sent: list, holder: str | None = None):
    """A beat scheduler on the product's schedule, kept in memory, that records (holder,
    entry name) in ``sent`` instead of sending."""
    scheduler = leader.LeaderScheduler(app=app, lazy=True)
    if holder is not None:
        scheduler.holder = holder
    monkeypatch.setattr(
        scheduler,
        "apply_entry",
        lambda entry, s=scheduler, **kw: sent.append((s.holder, entry.name)),
    )
    scheduler.setup_schedule = lambda: None
    scheduler._store = {"entries": {}}
    return scheduler


def _all_due(scheduler, app) -> None:
    scheduler.merge_inplace(app.conf.beat_schedule)
    for entry in scheduler.schedule.values():
        entry.last_run_at = timezone.now() - timedelta(days=1)


@pytest.mark.django_db
def test_the_beat_scheduler_sends_only_while_it_leads(monkeypatch):
    from qtg.celery import app

    sent = []
    schedulers = [_recording_scheduler(app, monkeypatch, sent, f"beat-{n}") for n in range(2)]
    first, second = schedulers

    for scheduler in schedulers:
        _all_due(scheduler, app)

    for _ in range(len(app.conf.beat_schedule) + 1):  # beat sends one due entry per tick
        first.tick()
        second.tick()
    assert first.leading and not second.leading
    assert {holder for holder, _ in sent} == {"beat-0"}
    assert {name for _, name in sent} == set(app.conf.beat_schedule)

    # the leader dies without releasing: after its lease, the other one sends
    LeaderLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    del sent[:]
    _all_due(second, app)
    for _ in range(len(app.conf.beat_schedule) + 1):
        second.tick()
    assert second.leading
    assert {holder for holder, _ in sent} == {"beat-1"}


def test_every_sweep_message_expires_once_later_ones_are_due():
    # A worker busy for a minute (a venue call on the solo pool) came back to ~800 queued
    # sweeps on RabbitMQ and ran them one by one: stale copies are discarded instead.
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        expires = entry["options"]["expires"]
        assert expires >= settings.QTG_SWEEP_EXPIRES_MIN_SECONDS, name
        assert expires >= 3 * entry["schedule"], name


@pytest.fixture
def broker_queues():
    """A Celery app like the product's on queues of its own (on this run's broker), and a
    reader of what waits in them; the queues are deleted afterwards."""
    from celery import Celery

    from qtg.queues import all_queues, task_routes

    base = f"qtg-coalesce-{uuid.uuid4().hex[:10]}"
    app = Celery("qtg-coalesce", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.task_default_queue = base
    app.conf.task_routes = task_routes(base)

    def waiting(queue: str) -> list[str]:
        """The task names of the messages ready in ``queue``, taken off it."""
        names = []
        with app.connection_for_read() as connection:
            bound = Queue(queue, no_declare=True)(connection.default_channel)
            while (message := bound.get(no_ack=True)) is not None:
                names.append(message.headers["task"])
        return names

    yield app, base, waiting
    with app.connection_for_write() as connection:
        for queue in all_queues(base):
            with contextlib.suppress(Exception):
                connection.channel().queue_delete(queue)


def test_beat_sends_no_copy_of_a_sweep_still_waiting_in_a_queue_its_workers_are_behind_on(
    broker_queues, settings
):
    # A worker that fell behind (a loaded machine, its peer paused holding messages) faced a
    # queue growing by every tick's sweeps; the rare one, recovery, expired in it time after
    # time while the frequent ones filled it, and an UNKNOWN node waited for tens of seconds.
    app, base, waiting = broker_queues
    settings.QTG_SWEEP_BACKLOG = 3
    scheduler = leader.LeaderScheduler(app=app, lazy=True)
    scheduler.depth_seconds = 0  # read the depth at every send

    def entry(name, task, expires=60.0):
        return scheduler.Entry(
            name=name, task=task, schedule=1.0, options={"expires": expires}, app=app
        )

    dispatch = entry("dispatch", "movements.dispatch_ready")
    recover = entry("recover", "movements.recover_unknown")
    observe = entry("observe", "movements.observe_submitted", expires=0.5)
    venues = f"{base}.venues"
    queued = 0

    def tick(entry):
        """Beat's send of ``entry``; then wait until the broker counts what was sent (RabbitMQ
        counts a message a moment after it was published)."""
        nonlocal queued
        before = scheduler.coalesced
        scheduler.apply_entry(entry, producer=scheduler.producer)
        if scheduler.coalesced == before:
            queued += 1
        deadline = time.monotonic() + 5
        while scheduler._read_depth(venues) < queued and time.monotonic() < deadline:
            time.sleep(0.02)

    try:
        for _ in range(5):  # every tick, nobody consuming
            tick(dispatch)
        # Sent while the queue was short; then a copy of one still waiting is not sent again.
        assert waiting(venues) == ["movements.dispatch_ready"] * 3
        queued = 0

        for _ in range(3):
            tick(dispatch)
        tick(observe)
        # The queue is behind again, but recovery has no message waiting in it: it goes.
        tick(recover)
        tick(recover)  # now it has one
        tick(dispatch)
        assert scheduler.coalesced == 2 + 2
        time.sleep(0.6)  # observe's message has expired: another is sent
        scheduler.apply_entry(observe, producer=scheduler.producer)
        assert scheduler.coalesced == 2 + 2
        left = waiting(venues)
        assert left.count("movements.dispatch_ready") == 3
        assert left.count("movements.recover_unknown") == 1
        # The second observe, and the first unless the broker dropped it when it expired
        # (RabbitMQ does; Redis and the embedded broker leave that to the worker).
        assert left.count("movements.observe_submitted") in (1, 2)
    finally:
        scheduler.producer.connection.release()


def test_beat_reads_an_empty_queue_as_none_waiting_on_the_channel_it_has(broker_queues):
    # Redis keeps no empty queue, and its passive declare says an empty queue does not exist:
    # beat took that for a broken channel and opened a new channel (a new connection and a
    # PING) at every reading, several times a tick, while the workers kept up.
    app, base, waiting = broker_queues
    scheduler = leader.LeaderScheduler(app=app, lazy=True)
    venues = f"{base}.venues"
    dispatch = scheduler.Entry(
        name="dispatch",
        task="movements.dispatch_ready",
        schedule=1.0,
        options={"expires": 60.0},
        app=app,
    )
    try:
        scheduler.apply_entry(dispatch, producer=scheduler.producer)  # the queue is declared
        assert waiting(venues) == ["movements.dispatch_ready"]  # and empty again
        assert scheduler._read_depth(venues) == 0
        channel = scheduler._depth_channel
        assert channel is not None
        for _ in range(3):
            assert scheduler._read_depth(venues) == 0
        assert scheduler._depth_channel is channel
        scheduler.apply_entry(dispatch, producer=scheduler.producer)
        deadline = time.monotonic() + 5  # RabbitMQ counts a message a moment after it came
        while scheduler._read_depth(venues) < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert scheduler._read_depth(venues) == 1
        assert scheduler._depth_channel is channel
    finally:
        scheduler.producer.connection.release()


@pytest.mark.django_db
def test_the_leading_beat_writes_its_lease_a_few_times_per_lease_not_per_message(monkeypatch):
    # Beat calls tick() once per message it sends; each renewal is a commit (a WAL flush on
    # PostgreSQL): on a busy database, beat sent only as fast as it could commit.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from qtg.celery import app

    sent = []
    scheduler = _recording_scheduler(app, monkeypatch, sent)
    _all_due(scheduler, app)

    with CaptureQueriesContext(connection) as queries:
        for _ in range(len(app.conf.beat_schedule) + 1):
            scheduler.tick()
    assert {name for _, name in sent} == set(app.conf.beat_schedule)
    lease_writes = [q for q in queries if "ops_leaderlease" in q["sql"]]
    assert 1 <= len(lease_writes) <= 3, [q["sql"] for q in lease_writes]

    # A third of a lease later it renews again.
    scheduler._lease_checked_at -= settings.QTG_SCHEDULER_LEASE_SECONDS / 3
    with CaptureQueriesContext(connection) as queries:
        scheduler.tick()
    assert [q for q in queries if "UPDATE" in q["sql"] and "ops_leaderlease" in q["sql"]]

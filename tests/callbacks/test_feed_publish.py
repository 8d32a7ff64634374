"""Publishing the feed: the committed events without a position get the next positions, in
the order they were recorded, and the counter moves past them (on PostgreSQL in one statement
that takes the counter's lock itself); a publisher that finds the counter held skips."""

import threading
import time

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from callbacks.models import Event, FeedCounter
from callbacks.services import events_publish
from tests.statements import statements
from tests.threads import own_connection

pytestmark = pytest.mark.django_db


def test_unpublished_events_get_the_next_positions_in_the_order_they_were_recorded(
    make_movement,
):
    make_movement()
    events_publish()
    published = FeedCounter.objects.get(pk=1).last_position
    make_movement(approve=True)
    waiting = list(Event.objects.filter(position__isnull=True).order_by("id"))

    with CaptureQueriesContext(connection) as queries:
        count = events_publish()

    assert count == len(waiting) > 1
    positions = [Event.objects.get(pk=event.pk).position for event in waiting]
    assert positions == list(range(published + 1, published + 1 + len(waiting)))
    assert FeedCounter.objects.get(pk=1).last_position == published + len(waiting)
    assert events_publish() == 0
    if connection.vendor == "postgresql":
        # Lock the counter, number the events and move it past them: one statement (every
        # worker's result commit publishes).
        assert len(statements(queries)) == 1


def test_a_publish_takes_no_more_than_its_limit_and_the_next_one_goes_on(make_movement):
    make_movement(approve=True)
    waiting = Event.objects.filter(position__isnull=True).count()

    first = events_publish(limit=2)
    rest = events_publish()

    assert (first, rest) == (2, waiting - 2)
    positions = list(Event.objects.order_by("id").values_list("position", flat=True))
    assert positions == sorted(positions) and None not in positions


@pytest.mark.django_db(transaction=True)
def test_a_publisher_that_finds_the_counter_held_skips_at_once_and_the_next_one_publishes(
    make_movement,
):
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    make_movement()
    events_publish()  # the counter row exists
    held, release, errors = threading.Event(), threading.Event(), []

    @own_connection(errors)
    def hold_the_counter() -> None:
        with transaction.atomic():
            FeedCounter.objects.select_for_update().get(pk=1)
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_counter)
    holder.start()
    try:
        assert held.wait(10)
        make_movement(approve=True)  # its commits' publishes find the counter held
        waiting = Event.objects.filter(position__isnull=True).count()
        started = time.monotonic()
        skipped = events_publish()
        took = time.monotonic() - started
    finally:
        release.set()
        holder.join(10)
    assert not errors

    assert waiting > 0
    assert skipped == 0 and took < 1  # it did not wait for the other publisher
    assert Event.objects.filter(position__isnull=True).count() == waiting
    assert events_publish() == waiting
    assert not Event.objects.filter(position__isnull=True).exists()

"""Publishing the feed: the committed events without a position get the next positions, in
the order they were recorded, and the counter moves past them (on PostgreSQL in one statement
under the counter's lock)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from callbacks.models import Event, FeedCounter
from callbacks.services import events_publish
from tests.statements import statements

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
        assert len(statements(queries)) == 2  # lock the counter; number the events, move it


def test_a_publish_takes_no_more_than_its_limit_and_the_next_one_goes_on(make_movement):
    make_movement(approve=True)
    waiting = Event.objects.filter(position__isnull=True).count()

    first = events_publish(limit=2)
    rest = events_publish()

    assert (first, rest) == (2, waiting - 2)
    positions = list(Event.objects.order_by("id").values_list("position", flat=True))
    assert positions == sorted(positions) and None not in positions

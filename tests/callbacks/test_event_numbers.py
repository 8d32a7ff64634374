"""A movement's callback events are numbered 1, 2, 3, ... under its row lock; a caller that
read the newest number with its locks (``sequences_known``) saves the read once."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from callbacks.models import Event
from callbacks.services import callback_enqueue, sequences_known, subscriptions_read_once

pytestmark = pytest.mark.django_db


def test_a_known_event_number_is_used_once_then_read_again(make_movement):
    """``sequences_known``: the next event of the movement is numbered after the number given,
    with no read; a later one (after a savepoint that may have rolled back) reads it again."""
    movement = make_movement()
    last = Event.objects.filter(request=movement).order_by("-sequence")[0].sequence
    with transaction.atomic(), subscriptions_read_once():
        sequences_known({movement.pk: last})
        with CaptureQueriesContext(connection) as first_queries:
            first = callback_enqueue(request=movement, event_type="frontier_advanced")
        with pytest.raises(RuntimeError), transaction.atomic():
            callback_enqueue(request=movement, event_type="frontier_advanced")
            raise RuntimeError("rolled back")
        with CaptureQueriesContext(connection) as later_queries:
            callback_enqueue(request=movement, event_type="frontier_advanced")

    assert not [q for q in first_queries.captured_queries if 'MAX("sequence")' in q["sql"]]
    assert [q for q in later_queries.captured_queries if 'MAX("sequence")' in q["sql"]]
    numbers = list(
        Event.objects.filter(request=movement)
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )
    assert numbers == list(range(1, last + 3))
    assert first is not None

"""A worker's write batch that ends several movements settles their reservations together:
one lock, one update, one read of their audit heads and one insert of their events, whatever
the number of movements; before the hooks that read them, so a callback enqueued earlier in
the batch shows each reservation settled."""

import json

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from callbacks.models import Event
from callbacks.services import callback_enqueue
from movements import ports
from movements.services.state import batch
from qtg.core.actors import Actor
from qtg.core.chain import verify_stream
from reservations.models import Reservation, ReservationEvent
from tests.statements import statements

pytestmark = pytest.mark.django_db

ACTOR = Actor.system("tests")


def reservation_statements(sent: list[str]) -> list[str]:
    """The settlements' statements (not the callback's read of the movement, which joins its
    reservation)."""
    return [sql for sql in sent if '"reservations_' in sql and 'FROM "movements_' not in sql]


@pytest.mark.parametrize("count", [1, 3])
def test_the_movements_a_batch_ends_are_settled_with_four_statements(make_movement, count):
    movements = [make_movement(approve=True) for _ in range(count)]
    consumed, released = movements[:-1], movements[-1:]

    with CaptureQueriesContext(connection) as queries, transaction.atomic(), batch():
        # A callback enqueued before the settlements, in the same batch.
        callback_enqueue(request=movements[0], event_type="frontier_advanced")
        for movement in consumed:
            ports.reservations().consume(request=movement, actor=ACTOR, reason="done")
        for movement in released:
            ports.reservations().release(request=movement, actor=ACTOR, reason="not sent")

    sent = reservation_statements(statements(queries))
    # Lock them, update them, read their audit heads, insert their events.
    assert len(sent) == 4, sent
    states = dict(Reservation.objects.values_list("request_id", "state"))
    assert [states[m.pk] for m in consumed] == ["CONSUMED"] * len(consumed)
    assert [states[m.pk] for m in released] == ["RELEASED"]
    for movement in movements:
        reservation = Reservation.objects.get(request=movement)
        assert reservation.settled_at is not None
        event = ReservationEvent.objects.filter(reservation=reservation).latest("pk")
        assert (event.old_state, event.new_state) == ("HELD", reservation.state)
        stream = ReservationEvent.objects.filter(reservation=reservation).order_by("pk")
        assert verify_stream(ReservationEvent, str(reservation.pk), stream) == []
    enqueued = Event.objects.filter(request=movements[0]).latest("sequence")
    shown = json.loads(enqueued.body)["data"]["reservation"]["state"]
    assert shown == states[movements[0].pk] != "HELD"


def test_a_movement_settled_twice_in_a_batch_is_settled_once_by_the_first(make_movement):
    movement = make_movement(approve=True)

    with transaction.atomic(), batch():
        ports.reservations().release(request=movement, actor=ACTOR, reason="first")
        ports.reservations().consume(request=movement, actor=ACTOR, reason="second")

    reservation = Reservation.objects.get(request=movement)
    assert reservation.state == "RELEASED"
    assert list(
        ReservationEvent.objects.filter(reservation=reservation)
        .exclude(old_state="")
        .values_list("reason", flat=True)
    ) == ["first"]


@pytest.mark.django_db(transaction=True)
def test_the_ledger_settles_at_once_outside_a_batch_and_outside_a_transaction(make_movement):
    movement = make_movement(approve=True)

    ports.reservations().consume(request=movement, actor=ACTOR, reason="done")

    assert Reservation.objects.get(request=movement).state == "CONSUMED"

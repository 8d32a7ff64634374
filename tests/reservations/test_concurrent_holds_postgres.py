"""Many creators at once can never push the in-flight sum past a hardcap (PostgreSQL only:
SQLite serialises writers anyway, so the race cannot even be staged there)."""

import threading
from decimal import Decimal

import pytest

from movements.services import movement_create, route_templates_sync
from movements.states import RequestState
from qtg.core.actors import Actor
from reservations.models import Reservation, ReservationState
from reservations.services import hardcap_ensure, hardcap_in_flight
from tests.conftest import make_user
from tests.threads import own_connection

THREADS = 24
AMOUNT = Decimal("100")
FITS = 10  # the cap holds exactly this many


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_creators_never_push_the_in_flight_sum_past_the_cap():
    cap = hardcap_ensure(asset="EURC", max_in_flight=AMOUNT * FITS)
    route_templates_sync()
    users = [make_user(f"creator-{i}") for i in range(THREADS)]
    start = threading.Barrier(THREADS)
    states: list[str] = []
    errors: list[BaseException] = []

    @own_connection(errors)
    def create(user) -> None:
        start.wait(timeout=30)
        request = movement_create(
            template="cex_to_cex",
            asset="EURC",
            amount=AMOUNT,
            source="venue-a",
            destination="venue-b",
            actor=Actor.for_user(user),
        )
        states.append(request.request_state)

    threads = [threading.Thread(target=create, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    assert len(states) == THREADS
    assert states.count(RequestState.PENDING_APPROVAL) == FITS
    assert states.count(RequestState.FAILED) == THREADS - FITS
    assert hardcap_in_flight(hardcap=cap) == AMOUNT * FITS
    assert Reservation.objects.filter(state=ReservationState.HELD).count() == FITS

"""The figures a hold decides on (``reservations.services._sums``), one statement compiled once
for each sequence of caps: per cap in flight and used over 24 hours, and a client's holds
awaiting approval, as the reservations' rows say, with each call's own values; on SQLite and
on PostgreSQL."""

from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone

from movements.models import MovementRequest
from reservations.models import Hardcap, Reservation
from reservations.services import _SUMS, PENDING_REQUEST_STATES, VELOCITY_WINDOW, _sums

pytestmark = pytest.mark.django_db

SOURCE = "sandbox-exchange-a"


def expected(caps, now, user_id, request) -> dict:
    """The figures counted row by row in Python."""
    since = now - VELOCITY_WINDOW
    rows = list(Reservation.objects.select_related("request"))

    def covers(cap, row):
        return row.asset == cap.asset and (not cap.source or row.source == cap.source)

    figures = {}
    for i, cap in enumerate(caps):
        mine = [r for r in rows if covers(cap, r)]
        figures[f"in_flight_{i}"] = sum((r.amount for r in mine if r.state == "HELD"), Decimal(0))
        figures[f"used_{i}"] = sum(
            (r.amount for r in mine if r.state in ("HELD", "CONSUMED") and r.held_at >= since),
            Decimal(0),
        )
    if user_id is not None:
        pending = [
            r
            for r in rows
            if r.state == "HELD"
            and r.request.created_by_id == user_id
            and r.request.request_state in PENDING_REQUEST_STATES
            and r.request_id != request.pk
        ]
        figures["client_count"] = len(pending)
        for i, cap in enumerate(caps):
            figures[f"client_held_{i}"] = sum(
                (r.amount for r in pending if covers(cap, r)), Decimal(0)
            )
    return figures


@pytest.fixture
def scene(make_movement):
    """ETH under a global cap and a cap on one source; holds of two clients, in every state
    that counts or does not, one of them held before the 24 hours."""
    other = get_user_model().objects.create_user("other-client")
    caps = [
        Hardcap.objects.get_or_create(asset="ETH", source="", defaults={"max_in_flight": 1000})[0],
        Hardcap.objects.create(asset="ETH", source=SOURCE, max_in_flight=Decimal("1000")),
    ]
    movements = [
        make_movement(asset="ETH", amount="1.5"),
        make_movement(
            asset="ETH",
            amount="2.25",
            source="sandbox-exchange-b",
            destination="sandbox-exchange-a",
        ),
        make_movement(asset="ETH", amount="4", by=other),
        make_movement(asset="ETH", amount="8", approve=True),
        make_movement(asset="ETH", amount="16"),
        make_movement(asset="ETH", amount="32"),
    ]
    now = timezone.now()
    Reservation.objects.filter(request=movements[4]).update(state="CONSUMED")
    Reservation.objects.filter(request=movements[5]).update(
        state="CONSUMED", held_at=now - VELOCITY_WINDOW - timedelta(minutes=1)
    )
    return caps, movements, now


def test_the_figures_are_the_rows_own_for_each_calls_caps_client_and_time(scene):
    caps, movements, now = scene
    creator = movements[0].created_by_id
    calls = [
        (caps, now, creator, movements[0]),
        (caps, now, creator, movements[1]),  # another movement left out of the client's
        (caps[:1], now, None, movements[0]),  # the global cap alone, no client
        (caps[1:], now, creator, movements[0]),  # the source's cap alone
        (caps[::-1], now, movements[2].created_by_id, movements[0]),
        (caps, now + VELOCITY_WINDOW, None, movements[0]),  # a day later: none used since
    ]
    with transaction.atomic():
        for call in calls:
            assert _sums(*call) == expected(*call), call
    # Each figure is money or a count, as the ORM's aggregate gave it.
    figures = _sums(caps, now, creator, movements[0])
    assert figures["in_flight_0"] == Decimal("15.75")  # 1.5 + 2.25 + 4 + 8
    assert figures["used_1"] == Decimal("29.5")  # 1.5 + 4 + 8 + 16 from the source, in 24 h
    assert figures["client_count"] == 1  # 2.25 (8 is approved, 1.5 is the one deciding)
    assert isinstance(figures["in_flight_0"], Decimal)


def test_the_statement_is_compiled_once_for_each_sequence_of_caps(scene):
    caps, movements, now = scene
    creator = movements[0].created_by_id
    for statement in _SUMS.values():
        statement._statements.clear()  # compiled by an earlier test on this connection
    with mock.patch.object(
        SQLCompiler, "as_sql", autospec=True, side_effect=SQLCompiler.as_sql
    ) as spy:
        for request in movements[:3]:
            _sums(caps, now, creator, request)
            _sums(caps[::-1], now, creator, request)
    compiled = [call for call in spy.call_args_list if call.args[0].query.model is Reservation]
    assert len(compiled) == 2  # one per order of the caps
    # and no movement is read to decide (the client's holds join their movements)
    assert not [c for c in spy.call_args_list if c.args[0].query.model is MovementRequest]

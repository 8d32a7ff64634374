"""Hardcaps: fail closed, the in-flight cap, the rolling 24-hour limit, scopes, Decimal money.

These tests use EURC, an asset the suite-wide default hardcaps leave alone, so each test sets
exactly the caps it is about.
"""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from movements.models import MovementEvent
from movements.services import movement_reject
from movements.states import RequestState
from qtg.core.actors import Actor
from reservations.models import Hardcap, Reservation, ReservationEvent, ReservationState
from reservations.services import (
    hardcap_ensure,
    hardcap_ensure_demo_defaults,
    hardcap_in_flight,
    hardcap_used_24h,
    reservation_consume,
    reservation_release,
)

pytestmark = pytest.mark.django_db

ASSET = "EURC"


@pytest.fixture
def eurc(make_movement):
    def _make(amount, **overrides):
        return make_movement(asset=ASSET, amount=amount, **overrides)

    return _make


def test_an_asset_without_a_hardcap_is_refused_with_a_reason_saying_so(eurc):
    request = eurc("10")

    assert request.request_state == RequestState.FAILED
    assert "no hardcap is configured for EURC" in request.failure_reason
    assert not Reservation.objects.filter(request=request).exists()


def test_a_movement_within_the_cap_holds_its_amount_with_an_audit_row(eurc, creator):
    hardcap_ensure(asset=ASSET, max_in_flight="1000")

    request = eurc("400.5")

    assert request.request_state == RequestState.PENDING_APPROVAL
    reservation = request.reservation
    assert (reservation.state, reservation.amount) == (ReservationState.HELD, Decimal("400.5"))
    event = reservation.events.get()
    assert (event.old_state, event.new_state) == ("", ReservationState.HELD)
    # The hold is the create's last step (the hardcap row stays locked only for it): the
    # movement it holds for is already PENDING_APPROVAL in that transaction.
    assert (event.request_state, event.actor_id) == (
        RequestState.PENDING_APPROVAL,
        str(creator.pk),
    )
    assert "hardcap EURC (any source)" in event.reason


def _failed_event(request) -> MovementEvent:
    return MovementEvent.objects.get(request=request, new_state=RequestState.FAILED)


def test_a_movement_over_the_cap_fails_naming_the_cap_the_amount_in_flight_and_the_ask(eurc):
    hardcap_ensure(asset=ASSET, max_in_flight="1000")
    eurc("700")

    refused = eurc("400")

    assert refused.request_state == RequestState.FAILED
    assert "hardcap EURC (any source)" in refused.failure_reason
    assert "refuses 400" in refused.failure_reason
    operator = _failed_event(refused).detail["operator"]
    assert "700 already in flight" in operator["reason"]
    assert "the cap is 1000" in operator["reason"]
    assert (operator["in_flight"], operator["cap"]) == ("700", "1000")
    assert not Reservation.objects.filter(request=refused).exists()
    assert Reservation.objects.filter(asset=ASSET).count() == 1


def test_filling_the_cap_exactly_is_allowed(eurc):
    cap = hardcap_ensure(asset=ASSET, max_in_flight="1000")
    eurc("600")

    request = eurc("400")

    assert request.request_state == RequestState.PENDING_APPROVAL
    assert hardcap_in_flight(hardcap=cap) == Decimal("1000")


def test_amounts_add_up_as_decimals_not_floats(eurc):
    # 0.1 + 0.2 > 0.3 in binary floating point; the cap must hold exactly 0.1 + 0.2 + 0.3.
    cap = hardcap_ensure(asset=ASSET, max_in_flight="0.6")
    eurc("0.1")
    eurc("0.2")

    request = eurc("0.3")

    assert request.request_state == RequestState.PENDING_APPROVAL
    assert hardcap_in_flight(hardcap=cap) == Decimal("0.6")


def test_a_released_reservation_frees_its_headroom(eurc, operator):
    hardcap_ensure(asset=ASSET, max_in_flight="1000")
    first = eurc("700")
    movement_reject(request=first, actor=Actor.for_user(operator), reason="wrong venue")

    request = eurc("400")

    assert request.request_state == RequestState.PENDING_APPROVAL


def test_consumed_reservations_leave_the_in_flight_sum_but_count_for_24_hours(eurc, system):
    cap = hardcap_ensure(asset=ASSET, max_in_flight="1000", max_per_24h="1500")
    done = eurc("800")
    reservation_consume(request=done, actor=system, reason="completed")

    refused = eurc("800")
    allowed = eurc("700")

    assert hardcap_in_flight(hardcap=cap) == Decimal("700")
    assert hardcap_used_24h(hardcap=cap) == Decimal("1500")
    assert refused.request_state == RequestState.FAILED
    operator = _failed_event(refused).detail["operator"]
    assert "800 reserved in the last 24 hours" in operator["reason"]
    assert "the 24-hour limit is 1500" in operator["reason"]
    assert allowed.request_state == RequestState.PENDING_APPROVAL


def test_reservations_older_than_24_hours_leave_the_velocity_window(eurc, system):
    hardcap_ensure(asset=ASSET, max_in_flight="1000", max_per_24h="1000")
    old = eurc("900")
    reservation_consume(request=old, actor=system, reason="completed")
    Reservation.objects.filter(request=old).update(held_at=timezone.now() - timedelta(hours=25))

    request = eurc("900")

    assert request.request_state == RequestState.PENDING_APPROVAL


def test_a_source_scoped_cap_limits_only_its_source_and_every_covering_cap_applies(eurc):
    hardcap_ensure(asset=ASSET, max_in_flight="1000")
    hardcap_ensure(asset=ASSET, source="venue-x", max_in_flight="300")

    from_x = eurc("400", source="venue-x")
    from_y = eurc("400", source="venue-y")
    over_asset_cap = eurc("700", source="venue-y")

    assert from_x.request_state == RequestState.FAILED
    assert "hardcap EURC from venue-x" in from_x.failure_reason
    assert from_y.request_state == RequestState.PENDING_APPROVAL
    assert over_asset_cap.request_state == RequestState.FAILED
    assert "hardcap EURC (any source)" in over_asset_cap.failure_reason


def test_an_inactive_hardcap_counts_as_no_hardcap(eurc):
    cap = hardcap_ensure(asset=ASSET, max_in_flight="1000")
    Hardcap.objects.filter(pk=cap.pk).update(is_active=False)

    request = eurc("10")

    assert request.request_state == RequestState.FAILED
    assert "no hardcap is configured" in request.failure_reason


def test_consume_and_release_are_idempotent_and_a_missing_reservation_is_a_no_op(eurc, system):
    hardcap_ensure(asset=ASSET, max_in_flight="1000")
    request = eurc("10")
    refused = eurc("5000")

    reservation_consume(request=request, actor=system, reason="completed")
    reservation_consume(request=request, actor=system, reason="completed again")
    reservation_release(request=request, actor=system, reason="late release")
    nothing = reservation_release(request=refused, actor=system, reason="failed")

    assert nothing is None
    reservation = Reservation.objects.get(request=request)
    assert reservation.state == ReservationState.CONSUMED
    assert list(reservation.events.values_list("new_state", flat=True)) == ["HELD", "CONSUMED"]


def test_reservation_history_is_append_only(eurc):
    hardcap_ensure(asset=ASSET, max_in_flight="1000")
    event = ReservationEvent.objects.get(reservation__request=eurc("10"))

    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        ReservationEvent.objects.all().delete()


def test_the_reservation_state_cannot_be_assigned_directly(eurc):
    hardcap_ensure(asset=ASSET, max_in_flight="1000")
    reservation = eurc("10").reservation

    with pytest.raises(AttributeError):
        reservation.state = ReservationState.RELEASED


def test_the_demo_defaults_cover_the_demo_assets_and_keep_existing_caps():
    Hardcap.objects.filter(asset="BTC").update(max_in_flight=Decimal("7"))

    caps = hardcap_ensure_demo_defaults()

    assert {cap.asset for cap in caps} == {"USDC", "USDT", "BTC", "ETH", "SOL"}
    assert Hardcap.objects.get(asset="BTC", source="").max_in_flight == Decimal("7")

"""An operator settles a reservation the post-transition table left HELD (a force-fail after
money may have left): service rules and the admin action with its confirmation step."""

import pytest
from django.contrib.admin import helpers
from django.contrib.auth.models import Permission
from django.urls import reverse

from movements.services import intervention_force_fail
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import ActionRefused, InvalidInput, NotFound, NotPermitted
from reservations.models import ReservationState
from reservations.services import reservation_settle
from tests.conftest import ALL_MOVEMENT_PERMS, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def settler(db):
    user = make_user("settler", *ALL_MOVEMENT_PERMS, is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(
            content_type__app_label="reservations", codename="settle_reservation"
        ),
        Permission.objects.get(content_type__app_label="reservations", codename="view_reservation"),
    )
    return type(user).objects.get(pk=user.pk)


@pytest.fixture
def force_failed(make_movement, drive, operator):
    """A movement whose withdrawal completed, then force-failed: its reservation stays HELD."""
    request = make_movement(approve=True)
    drive.run(request, "withdraw")
    drive.run(request, "withdraw_observe", outcome=NodeState.FAILED)
    return intervention_force_fail(
        request=request, actor=Actor.for_user(operator), reason="venue lost the deposit"
    )


def test_an_operator_releases_a_force_failed_reservation_with_a_reason(force_failed, settler):
    reservation = force_failed.reservation
    assert reservation.state == ReservationState.HELD

    reservation_settle(
        reservation=reservation,
        outcome=ReservationState.RELEASED,
        reason="venue refunded it",
        actor=Actor.for_user(settler),
    )

    reservation.refresh_from_db()
    assert reservation.state == ReservationState.RELEASED
    event = reservation.events.order_by("-id").first()
    assert (event.old_state, event.new_state) == ("HELD", "RELEASED")
    assert (event.reason, event.actor_id) == ("venue refunded it", str(settler.pk))
    assert (event.request_state, event.detail) == (RequestState.FAILED, {"manual": True})


def test_settling_needs_the_permission(force_failed, operator):
    with pytest.raises(NotPermitted):
        reservation_settle(
            reservation=force_failed.reservation,
            outcome="CONSUMED",
            reason="gone",
            actor=Actor.for_user(operator),
        )


@pytest.mark.parametrize(("outcome", "reason"), [("CONSUMED", "  "), ("HELD", "why not")])
def test_settling_needs_a_reason_and_a_final_outcome(force_failed, settler, outcome, reason):
    with pytest.raises(InvalidInput):
        reservation_settle(
            reservation=force_failed.reservation,
            outcome=outcome,
            reason=reason,
            actor=Actor.for_user(settler),
        )
    assert force_failed.reservation.events.count() == 1


def test_a_running_movement_reservation_cannot_be_settled_by_hand(make_movement, settler):
    request = make_movement(approve=True)

    with pytest.raises(ActionRefused, match="APPROVED"):
        reservation_settle(
            reservation=request.reservation,
            outcome="RELEASED",
            reason="looks stuck",
            actor=Actor.for_user(settler),
        )


@pytest.mark.parametrize("missing", [987654, "not-a-number"])
def test_settling_a_missing_reservation_is_not_found(settler, missing):
    with pytest.raises(NotFound):
        reservation_settle(
            reservation=missing, outcome="RELEASED", reason="x", actor=Actor.for_user(settler)
        )


def test_a_settled_reservation_cannot_be_settled_again(force_failed, settler):
    actor = Actor.for_user(settler)
    reservation_settle(
        reservation=force_failed.reservation, outcome="CONSUMED", reason="it left", actor=actor
    )

    with pytest.raises(ActionRefused, match="already CONSUMED"):
        reservation_settle(
            reservation=force_failed.reservation,
            outcome="RELEASED",
            reason="changed my mind",
            actor=actor,
        )


def _post_action(client, action, reservation, **extra):
    return client.post(
        reverse("admin:reservations_reservation_changelist"),
        {"action": action, helpers.ACTION_CHECKBOX_NAME: [str(reservation.pk)], **extra},
    )


def test_the_admin_action_asks_for_confirmation_before_consuming(client, force_failed, settler):
    client.force_login(settler)
    reservation = force_failed.reservation

    page = _post_action(client, "consume_selected", reservation)

    assert page.status_code == 200
    assert b"Yes, consume" in page.content
    reservation.refresh_from_db()
    assert reservation.state == ReservationState.HELD


def test_the_admin_action_consumes_with_the_reason_once_confirmed(client, force_failed, settler):
    client.force_login(settler)
    reservation = force_failed.reservation

    response = _post_action(
        client, "consume_selected", reservation, post="yes", reason="withdrawal confirmed on chain"
    )

    assert response.status_code == 302
    reservation.refresh_from_db()
    assert reservation.state == ReservationState.CONSUMED
    assert reservation.events.order_by("-id").first().reason == "withdrawal confirmed on chain"


def test_the_admin_action_refuses_an_empty_reason(client, force_failed, settler):
    client.force_login(settler)

    page = _post_action(client, "release_selected", force_failed.reservation, post="yes", reason="")

    assert page.status_code == 200
    assert b"This field is required" in page.content
    force_failed.reservation.refresh_from_db()
    assert force_failed.reservation.state == ReservationState.HELD


def test_the_admin_shows_the_reservation_history_read_only(client, force_failed, settler):
    client.force_login(settler)

    page = client.get(
        reverse("admin:reservations_reservation_change", args=[force_failed.reservation.pk])
    )

    assert page.status_code == 200
    assert b"held against hardcap USDC (any source)" in page.content
    assert b'name="_save"' not in page.content


def test_the_settle_actions_are_hidden_without_the_permission(client, force_failed, settler):
    settler.user_permissions.remove(
        Permission.objects.get(
            content_type__app_label="reservations", codename="settle_reservation"
        )
    )
    client.force_login(type(settler).objects.get(pk=settler.pk))

    page = client.get(reverse("admin:reservations_reservation_changelist"))

    assert page.status_code == 200
    assert b"consume_selected" not in page.content

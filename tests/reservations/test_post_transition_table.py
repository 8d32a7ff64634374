"""Every terminal and waiting request state, and every operator action, produces exactly the
reservation effect and the callback events of the spec's post-transition table.

Each scenario brings a movement to the step under test through the real services, then the
step itself runs; the callback events are those the step wrote to the outbox.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from callbacks.events import EVENT_TYPES
from callbacks.models import Delivery, Subscription
from movements.services import (
    intervention_force_complete,
    intervention_force_fail,
    intervention_retry,
    manual_gate_resume,
    movement_approve,
    movement_cancel,
    movement_create,
    movement_expire,
    movement_reject,
    node_resolve_unknown,
)
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from reservations.models import Reservation, ReservationState

pytestmark = pytest.mark.django_db

HELD, CONSUMED, RELEASED = (
    ReservationState.HELD,
    ReservationState.CONSUMED,
    ReservationState.RELEASED,
)


@dataclass
class World:
    make: Callable
    drive: object
    operator: Actor
    creator: object

    def approved(self, template="cex_to_cex"):
        return self.make(template, approve=True)

    def intervention(self):
        request = self.approved()
        self.drive.run(request, "withdraw")
        return self.drive.run(request, "withdraw_observe", outcome=NodeState.FAILED)

    def waiting_at_gate(self):
        request = self.approved("cex_to_cex_gated")
        return self.drive.run(request, "withdraw")


def _approve(w, r):
    return movement_approve(request=r, actor=w.operator)


# name, setup(world) -> request, step(world, request) -> request, expected state,
# reservation effect (None: no reservation at all), callback events of the step
SCENARIOS = [
    (
        "approved",
        lambda w: w.make(),
        _approve,
        RequestState.APPROVED,
        HELD,
        ["frontier_advanced", "request_approved"],
    ),
    (
        "completed",
        lambda w: w.drive.run(w.drive.run(w.approved(), "withdraw"), "withdraw_observe"),
        lambda w, r: w.drive.run(r, "deposit_observe"),
        RequestState.COMPLETED,
        CONSUMED,
        ["request_completed"],
    ),
    (
        "failed without a completed side effect",
        lambda w: w.approved(),
        lambda w, r: w.drive.run(r, "withdraw", outcome=NodeState.FAILED),
        RequestState.FAILED,
        RELEASED,
        ["request_failed"],
    ),
    (
        "manual intervention",
        lambda w: w.drive.run(w.approved(), "withdraw"),
        lambda w, r: w.drive.run(r, "withdraw_observe", outcome=NodeState.FAILED),
        RequestState.MANUAL_INTERVENTION,
        HELD,
        ["request_attention", "request_manual_intervention"],
    ),
    (
        "waiting for a manual action",
        lambda w: w.approved("cex_to_cex_gated"),
        lambda w, r: w.drive.run(r, "withdraw"),
        RequestState.WAITING_MANUAL_ACTION,
        HELD,
        ["frontier_advanced", "request_attention", "request_waiting_manual_action"],
    ),
    (
        "manual gate resumed",
        lambda w: w.waiting_at_gate(),
        lambda w, r: manual_gate_resume(request=r, actor=w.operator),
        RequestState.EXECUTING,
        HELD,
        ["frontier_advanced"],
    ),
    (
        "rejected",
        lambda w: w.make(),
        lambda w, r: movement_reject(request=r, actor=w.operator, reason="not today"),
        RequestState.REJECTED,
        RELEASED,
        ["request_rejected"],
    ),
    (
        "expired",
        lambda w: w.make(expires_in=timedelta(microseconds=1)),
        lambda w, r: movement_expire(request=r, actor=Actor.system("tests-expirer")),
        RequestState.EXPIRED,
        RELEASED,
        ["request_expired"],
    ),
    (
        "cancelled before money left",
        lambda w: w.drive.dispatch_and_requeue(w.approved(), "withdraw"),
        lambda w, r: movement_cancel(request=r, actor=w.operator, reason="changed plans"),
        RequestState.CANCELLED,
        RELEASED,
        ["request_cancelled"],
    ),
    (
        "cancelled after a side effect completed",
        lambda w: w.waiting_at_gate(),
        lambda w, r: movement_cancel(
            request=r,
            actor=w.operator,
            reason="destination closed",
            acknowledge_funds_in_transit=True,
        ),
        RequestState.CANCELLED,
        HELD,
        ["request_cancelled"],
    ),
    (
        "force-completed by an operator",
        lambda w: w.intervention(),
        lambda w, r: intervention_force_complete(request=r, actor=w.operator, reason="credited"),
        RequestState.COMPLETED,
        CONSUMED,
        ["request_completed"],
    ),
    (
        "force-failed by an operator",
        lambda w: w.intervention(),
        lambda w, r: intervention_force_fail(request=r, actor=w.operator, reason="lost at venue"),
        RequestState.FAILED,
        HELD,
        ["request_failed"],
    ),
    (
        "unknown withdrawal resolved as failed by an operator",
        lambda w: w.drive.run(w.approved(), "withdraw", outcome=NodeState.UNKNOWN),
        lambda w, r: node_resolve_unknown(
            request=r,
            node_key="withdraw",
            outcome=NodeState.FAILED,
            evidence="venue says: never sent",
            actor=w.operator,
        ),
        RequestState.FAILED,
        RELEASED,
        ["request_failed"],
    ),
    (
        "failed node retried by an operator",
        lambda w: w.intervention(),
        lambda w, r: intervention_retry(
            request=r, node_key="withdraw_observe", actor=w.operator, reason="venue is back"
        ),
        RequestState.EXECUTING,
        HELD,
        [],
    ),
    (
        "refused by the hardcap at validation",
        lambda w: None,
        lambda w, r: movement_create(
            template="cex_to_cex",
            asset="EURC",
            amount="1",
            source="a",
            destination="b",
            actor=Actor.for_user(w.creator),
        ),
        RequestState.FAILED,
        None,
        ["request_created", "request_failed"],
    ),
]


@pytest.fixture
def world(make_movement, drive, operator, creator) -> World:
    Subscription.objects.create(
        name="everything", url="http://127.0.0.1:9/hook", event_types=list(EVENT_TYPES)
    )
    return World(
        make=make_movement, drive=drive, operator=Actor.for_user(operator), creator=creator
    )


@pytest.mark.parametrize(
    ("setup", "step", "state", "reservation_state", "events"),
    [pytest.param(*row[1:], id=row[0]) for row in SCENARIOS],
)
def test_each_state_and_action_has_exactly_its_reservation_effect_and_callbacks(
    world, setup, step, state, reservation_state, events
):
    request = setup(world)
    before = set(Delivery.objects.values_list("pk", flat=True))

    request = step(world, request)

    request.refresh_from_db()
    assert request.request_state == state
    reservation = Reservation.objects.filter(request=request).first()
    assert (reservation.state if reservation else None) == reservation_state
    written = Delivery.objects.exclude(pk__in=before)
    assert sorted(written.values_list("event_type", flat=True)) == sorted(events)
    assert set(written.values_list("request_id", flat=True)) <= {request.pk}


def test_a_settling_transition_records_who_why_and_the_request_state(world):
    request = world.make()

    movement_reject(request=request, actor=world.operator, reason="not today")

    event = request.reservation.events.order_by("-id").first()
    assert (event.old_state, event.new_state) == (HELD, RELEASED)
    assert event.request_state == RequestState.REJECTED
    assert event.actor_id == world.operator.id
    assert event.reason == "request PENDING_APPROVAL -> REJECTED"

"""A node that waits on the outside world longer than its executor expects makes the movement
need attention: raised once, one callback, handled by a supervisor (snooze, resolve, stop
watching)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from callbacks.models import Delivery, Subscription
from movements.selectors import open_attentions
from movements.services.attention import (
    attention_resolve,
    attention_snooze,
    attention_stop_watching,
    detect_stuck_nodes,
)
from qtg.core.actors import Actor
from qtg.core.errors import ActionRefused, NotPermitted
from reservations.models import ReservationState
from tests.conftest import make_user
from tests.execution.conftest import run_workers_once
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


@pytest.fixture
def never_arrives(make_movement):
    """The withdrawal completes; the deposit is not seen for an hour."""
    movement = make_movement(approve=True, params={"sandbox": {"deposit_observe": "delay:3600"}})
    for _ in range(20):
        run_workers_once()
        if node(movement, "deposit_observe").node_state == "OBSERVING":
            return movement
    raise AssertionError("the deposit observer never started")


@pytest.fixture
def subscriber(db):
    return Subscription.objects.create(
        name="ops", url="https://hooks.example.com/qtg", event_types=["request_attention"]
    )


def test_a_deposit_that_never_arrives_needs_attention_once(never_arrives, subscriber, settings):
    settings.QTG_STUCK_AFTER_SECONDS = 0.01
    later = timezone.now() + timedelta(seconds=1)

    assert detect_stuck_nodes(now=later) == 1
    assert detect_stuck_nodes(now=later + timedelta(seconds=5)) == 0  # not once per sweep

    [entry] = open_attentions(never_arrives)
    assert entry.node_key == "deposit_observe"
    assert entry.reason == "stuck"
    assert "deposit_observe has been OBSERVING" in entry.message
    assert (
        Delivery.objects.filter(request=never_arrives, event_type="request_attention").count() == 1
    )


def test_nothing_is_stuck_before_its_executor_expects(never_arrives, settings):
    settings.QTG_STUCK_AFTER_SECONDS = 1800

    assert detect_stuck_nodes(now=timezone.now() + timedelta(seconds=1700)) == 0
    assert open_attentions(never_arrives) == []


def test_a_snoozed_entry_needs_nobody_until_its_time(never_arrives, operator, settings):
    settings.QTG_STUCK_AFTER_SECONDS = 0.01
    detect_stuck_nodes(now=timezone.now() + timedelta(seconds=1))
    [entry] = open_attentions(never_arrives)

    until = timezone.now() + timedelta(hours=1)
    attention_snooze(
        request=never_arrives,
        node_key=entry.node_key,
        until=until,
        reason="venue says deposits are delayed today",
        actor=Actor.for_user(operator),
    )

    assert open_attentions(never_arrives) == []
    assert detect_stuck_nodes(now=timezone.now() + timedelta(seconds=10)) == 0
    assert [e.pk for e in open_attentions(never_arrives, now=until + timedelta(seconds=1))] == [
        entry.pk
    ]


def test_a_resolved_entry_is_raised_again_only_after_another_full_wait(
    never_arrives, operator, settings
):
    settings.QTG_STUCK_AFTER_SECONDS = 60
    detect_stuck_nodes(now=timezone.now() + timedelta(seconds=61))
    [entry] = open_attentions(never_arrives, now=timezone.now())
    attention_resolve(
        request=never_arrives,
        node_key=entry.node_key,
        note="asked the venue, it is coming",
        actor=Actor.for_user(operator),
    )

    assert detect_stuck_nodes(now=timezone.now() + timedelta(seconds=30)) == 0
    assert detect_stuck_nodes(now=timezone.now() + timedelta(seconds=61)) == 1


def test_stopping_watching_fails_the_observer_and_hands_the_movement_to_its_rescue_paths(
    never_arrives, operator
):
    movement = attention_stop_watching(
        request=never_arrives,
        node_key="deposit_observe",
        reason="deposit confirmed lost with the venue, ticket 4411",
        actor=Actor.for_user(operator),
    )

    movement.refresh_from_db()
    assert node(movement, "deposit_observe").node_state == "FAILED"
    assert movement.request_state == "MANUAL_INTERVENTION"  # the withdrawal completed
    assert movement.reservation.state == ReservationState.HELD


def test_only_an_observing_observe_node_can_stop_being_watched(never_arrives, operator):
    with pytest.raises(ActionRefused):
        attention_stop_watching(
            request=never_arrives,
            node_key="withdraw",
            reason="no",
            actor=Actor.for_user(operator),
        )


def test_handling_attention_needs_its_permission(never_arrives, creator):
    plain = make_user("plain-operator", "approve_movement")

    with pytest.raises(NotPermitted):
        attention_stop_watching(
            request=never_arrives,
            node_key="deposit_observe",
            reason="x",
            actor=Actor.for_user(plain),
        )
    assert node(never_arrives, "deposit_observe").node_state == "OBSERVING"

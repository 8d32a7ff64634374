"""The console and attention: a stuck movement is in "Needs me" with its reason, its page says
why, and a supervisor snoozes, resolves or stops watching it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from movements.services.attention import detect_stuck_nodes
from tests.admin.conftest import TO_COMPLETED, drive
from tests.admin.helpers import action_url, change_url, changelist_url, messages_of, post_action
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


@pytest.fixture
def stuck(executing):
    movement = drive(executing(), "withdraw", *TO_COMPLETED)
    drive(movement, "withdraw_observe", "OBSERVING", "COMPLETED")
    movement = drive(movement, "deposit_observe", "OBSERVING")
    assert detect_stuck_nodes(now=timezone.now() + timedelta(days=1)) == 1
    return movement


def test_needs_me_lists_a_stuck_movement_with_the_reason(client, op, stuck):
    client.force_login(op)

    html = client.get(changelist_url() + "?state=needs_me").content.decode()

    assert str(stuck.pk) in html
    assert "Stuck longer than expected: deposit_observe" in html


def test_the_movement_page_says_what_needs_attention(client, op, stuck):
    client.force_login(op)

    html = client.get(change_url(stuck)).content.decode()

    assert 'id="qtg-attention"' in html
    assert "deposit_observe has been OBSERVING" in html
    # An operator without the supervisor's permission is not offered the handling actions.
    assert 'data-action="stop_watching"' not in html


def test_a_supervisor_stops_watching_and_the_movement_goes_to_its_rescue_paths(
    client, supervisor, stuck
):
    client.force_login(supervisor)
    assert 'data-action="stop_watching"' in client.get(change_url(stuck)).content.decode()

    response = post_action(
        client,
        stuck,
        "stop_watching",
        {"node_key": "deposit_observe", "reason": "the venue lost it, ticket 12"},
    )

    stuck.refresh_from_db()
    assert node(stuck, "deposit_observe").node_state == "FAILED"
    assert stuck.request_state == "MANUAL_INTERVENTION"
    assert any("MANUAL_INTERVENTION" in m for m in messages_of(response))


def test_a_supervisor_snoozes_and_the_movement_leaves_needs_me(client, supervisor, stuck):
    client.force_login(supervisor)

    post_action(
        client,
        stuck,
        "snooze_attention",
        {"node_key": "deposit_observe", "hours": "6", "reason": "bank holiday at the venue"},
    )

    html = client.get(changelist_url() + "?state=needs_me").content.decode()
    assert str(stuck.pk) not in html
    assert "snoozed until" in client.get(change_url(stuck)).content.decode()


def test_cancelling_with_funds_in_transit_asks_for_the_acknowledgement(
    client, supervisor, waiting_at_gate
):
    movement = waiting_at_gate()
    client.force_login(supervisor)

    page = client.get(action_url(movement, "cancel")).content.decode()
    assert 'name="acknowledge_funds_in_transit"' in page

    refused = post_action(client, movement, "cancel", {"reason": "client asked"})
    movement.refresh_from_db()
    assert movement.request_state == "WAITING_MANUAL_ACTION"
    assert any("acknowledge_funds_in_transit" in m for m in messages_of(refused))

    post_action(
        client,
        movement,
        "cancel",
        {"reason": "client asked", "acknowledge_funds_in_transit": "on"},
    )
    movement.refresh_from_db()
    assert movement.request_state == "CANCELLED"
    assert movement.reservation.state == "HELD"

"""Actions on one movement: a confirmation page, then the service; its refusals become admin
error messages and change nothing."""

import pytest

from movements.models import MovementEvent
from movements.states import NodeState, RequestState
from tests.admin.conftest import OPERATOR_ACTIONS, SCENARIOS, SUPERVISOR_ONLY_ACTIONS, snapshot
from tests.admin.helpers import action_url, change_url, messages_of, post_action

ALL_ACTIONS = sorted(SCENARIOS)


@pytest.mark.parametrize("name", ALL_ACTIONS)
def test_each_action_asks_for_confirmation_first_and_changes_nothing_on_get(
    client, supervisor, scenario, name
):
    # given a movement where the action is legal
    movement, _, _ = scenario(name)
    before = snapshot(movement)
    client.force_login(supervisor)

    # when the supervisor opens the action
    response = client.get(action_url(movement, name))

    # then a confirmation page asks to POST, and nothing changed
    assert response.status_code == 200
    assert b'name="post" value="yes"' in response.content
    assert b'id="qtg-confirm"' in response.content
    assert snapshot(movement) == before


@pytest.mark.parametrize("name", ALL_ACTIONS)
def test_each_confirmed_action_calls_its_service_and_records_the_user(
    client, supervisor, scenario, name
):
    # given a movement where the action is legal
    movement, data, expected = scenario(name)
    client.force_login(supervisor)

    # when the supervisor confirms it
    response = post_action(client, movement, name, data)

    # then the movement moved on, the page says so, and the audit names the supervisor
    assert response.status_code == 302
    assert response["Location"] == change_url(movement)
    movement.refresh_from_db()
    assert movement.request_state == expected
    assert any(f"is now {expected}" in m for m in messages_of(response))
    latest = MovementEvent.objects.filter(request=movement).order_by("-created_at", "-id")[0]
    assert (latest.actor_type, latest.actor_id) == ("user", str(supervisor.pk))


@pytest.mark.parametrize("name", ALL_ACTIONS)
def test_posting_an_action_without_its_permission_is_refused_by_the_service(
    client, viewer, scenario, name
):
    # given a movement where the action is legal, and staff who may only view movements
    movement, data, _ = scenario(name)
    before = snapshot(movement)
    client.force_login(viewer)

    # when they post the action anyway
    response = post_action(client, movement, name, data)

    # then the service refuses it, the page says why, and nothing changed
    assert response.status_code == 302
    assert any("refused" in m and "lacks the permission" in m for m in messages_of(response))
    assert snapshot(movement) == before


@pytest.mark.parametrize("name", SUPERVISOR_ONLY_ACTIONS)
def test_an_operator_cannot_take_a_supervisor_action(client, op, scenario, name):
    # given a movement in trouble and an operator (not a supervisor)
    movement, data, _ = scenario(name)
    before = snapshot(movement)
    client.force_login(op)

    # when the operator opens the page, then the action is not offered
    page = client.get(change_url(movement))
    assert f'data-action="{name}"'.encode() not in page.content

    # and when they post it anyway, then the service refuses and nothing changed
    response = post_action(client, movement, name, data)
    assert any("lacks the permission" in m for m in messages_of(response))
    assert snapshot(movement) == before


@pytest.mark.parametrize("name", OPERATOR_ACTIONS)
def test_an_operator_takes_the_operator_actions(client, op, scenario, name):
    movement, data, expected = scenario(name)
    client.force_login(op)

    post_action(client, movement, name, data)

    movement.refresh_from_db()
    assert movement.request_state == expected


def test_four_eyes_the_creator_of_a_movement_cannot_approve_it(client, op, make_movement):
    # given a movement the operator created themselves
    movement = make_movement(by=op)
    before = snapshot(movement)
    client.force_login(op)

    # when they look at it, then approve is not offered and the page says why
    page = client.get(change_url(movement))
    assert b'data-action="approve"' not in page.content
    assert b'data-action="reject"' in page.content
    assert b"Four-eyes" in page.content

    # and when they post approve anyway, then the service refuses it
    response = post_action(client, movement, "approve")
    assert any("four-eyes" in m for m in messages_of(response))
    assert snapshot(movement) == before


@pytest.mark.parametrize("name", ALL_ACTIONS)
def test_a_double_click_acts_once_and_the_second_post_is_refused(
    client, supervisor, scenario, name
):
    # given an action already confirmed once
    movement, data, expected = scenario(name)
    client.force_login(supervisor)
    post_action(client, movement, name, data)
    after_first = snapshot(movement)

    # when the same POST arrives again
    response = post_action(client, movement, name, data)

    # then the service refuses it with a message, and nothing more changed
    assert response.status_code == 302
    assert any("refused" in m for m in messages_of(response))
    assert snapshot(movement) == after_first
    assert after_first[0] == expected


def test_a_stale_action_page_redirects_with_an_error_when_someone_else_acted_first(
    client, op, supervisor, make_movement
):
    # given a movement another operator already rejected
    movement = make_movement()
    client.force_login(supervisor)
    post_action(client, movement, "reject", {"reason": "duplicate"})
    client.force_login(op)

    # when the operator opens approve from an old page
    response = client.get(action_url(movement, "approve"))

    # then they land back on the movement with an error, and it stays rejected
    assert response.status_code == 302
    assert response["Location"] == change_url(movement)
    assert any("not possible now" in m and "REJECTED" in m for m in messages_of(response))
    movement.refresh_from_db()
    assert movement.request_state == RequestState.REJECTED


def test_an_action_that_needs_a_reason_shows_the_form_again_without_one(client, op, make_movement):
    movement = make_movement()
    before = snapshot(movement)
    client.force_login(op)

    response = post_action(client, movement, "reject", {"reason": "  "})

    assert response.status_code == 200
    assert b"This field is required" in response.content
    assert snapshot(movement) == before


def test_an_unknown_action_name_is_a_404_not_a_500(client, supervisor, make_movement):
    movement = make_movement()
    client.force_login(supervisor)

    assert client.get(action_url(movement, "nuke")).status_code == 404
    assert post_action(client, movement, "nuke").status_code == 404


def test_staff_without_view_permission_cannot_reach_an_action(client, make_movement):
    from tests.conftest import make_user

    movement = make_movement()
    outsider = make_user("otto", "approve_movement", is_staff=True)
    before = snapshot(movement)
    client.force_login(outsider)

    response = post_action(client, movement, "approve")

    assert response.status_code == 403
    assert snapshot(movement) == before


def test_cancel_is_hidden_and_refused_while_money_may_be_in_flight(client, op, executing):
    from tests.admin.conftest import drive

    # given an executing movement whose withdrawal is being submitted
    movement = drive(executing(), "withdraw", "PREPARING", "SUBMITTING")
    before = snapshot(movement)
    client.force_login(op)

    # then cancel is not offered, and a posted cancel is refused by the service
    assert b'data-action="cancel"' not in client.get(change_url(movement)).content
    response = post_action(client, movement, "cancel", {"reason": "changed my mind"})
    assert any("in flight" in m for m in messages_of(response))
    assert snapshot(movement) == before


def test_resolving_an_unknown_node_records_the_outcome_and_the_evidence(
    client, supervisor, intervention_unknown
):
    movement = intervention_unknown()
    client.force_login(supervisor)

    post_action(
        client,
        movement,
        "resolve_unknown",
        {
            "node_key": "withdraw_observe",
            "outcome": "FAILED",
            "evidence": "venue: no such withdrawal",
        },
    )

    node = movement.nodes.get(node_key="withdraw_observe", is_current=True)
    assert node.node_state == NodeState.FAILED
    event = node.events.order_by("-id")[0]
    assert event.detail == {"resolution": "manual", "evidence": "venue: no such withdrawal"}
    movement.refresh_from_db()
    assert movement.request_state == RequestState.MANUAL_INTERVENTION


def test_resolve_offers_only_unknown_nodes_and_retry_only_failed_ones(
    client, supervisor, intervention_unknown, intervention_failed
):
    client.force_login(supervisor)

    resolve = client.get(action_url(intervention_unknown(), "resolve_unknown"))
    retry = client.get(action_url(intervention_failed(), "intervention_retry"))

    assert resolve.context["form"].fields["node_key"].choices == [
        ("withdraw_observe", "withdraw_observe (UNKNOWN: SUBMITTED or COMPLETED or FAILED)")
    ]
    assert retry.context["form"].fields["node_key"].choices == [
        ("withdraw_observe", "withdraw_observe (FAILED)")
    ]


def test_retry_makes_a_new_attempt_and_keeps_the_failed_one(
    client, supervisor, intervention_failed
):
    movement = intervention_failed()
    client.force_login(supervisor)

    post_action(
        client,
        movement,
        "intervention_retry",
        {"node_key": "withdraw_observe", "reason": "venue fixed"},
    )

    attempts = list(
        movement.nodes.filter(node_key="withdraw_observe")
        .order_by("attempt")
        .values_list("attempt", "node_state", "is_current")
    )
    assert attempts == [(1, "FAILED", False), (2, "READY", True)]


def test_a_stale_node_choice_is_refused_by_the_service(client, supervisor, intervention_unknown):
    # given an UNKNOWN node somebody resolved while the form was open
    movement = intervention_unknown()
    client.force_login(supervisor)
    data = {"node_key": "withdraw_observe", "outcome": "SUBMITTED", "evidence": "seen on chain"}
    post_action(client, movement, "resolve_unknown", data)
    before = snapshot(movement)

    # when the form is posted again with a different outcome
    response = post_action(client, movement, "resolve_unknown", {**data, "outcome": "FAILED"})

    # then the service refuses: the node is no longer UNKNOWN
    assert any("not UNKNOWN" in m for m in messages_of(response))
    assert snapshot(movement) == before


def test_opening_an_action_without_its_permission_says_so_and_changes_nothing(
    client, op, intervention_failed
):
    movement = intervention_failed()
    before = snapshot(movement)
    client.force_login(op)

    response = client.get(action_url(movement, "force_fail"))

    assert response.status_code == 302
    assert any("movements.force_fail_movement" in m for m in messages_of(response))
    assert snapshot(movement) == before


def test_opening_approve_on_your_own_movement_names_four_eyes(client, op, make_movement):
    movement = make_movement(by=op)
    client.force_login(op)

    response = client.get(action_url(movement, "approve"))

    assert response.status_code == 302
    assert any("four-eyes" in m for m in messages_of(response))

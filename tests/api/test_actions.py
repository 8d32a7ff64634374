"""POST /api/v1/movements/{id}/approve|reject|cancel|resume/: permissions, four-eyes, 409s."""

import uuid

import pytest
from django.db import transaction

from movements.models import MovementEvent, MovementRequest
from movements.selectors import current_nodes
from movements.services import advance_after_completion, set_node_state, set_request_state
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import StaleState
from tests.api.conftest import assert_error, client_for, movement_url, post_create, post_json
from tests.conftest import ALL_MOVEMENT_PERMS, make_user


def complete_node(movement_id, node_key: str) -> None:
    """Stand in for the execution workers: run one READY node to COMPLETED."""
    actor = Actor.system("tests-worker")
    with transaction.atomic():
        request = MovementRequest.objects.select_for_update().get(pk=movement_id)
        nodes = current_nodes(request, lock=True)
        node = next(n for n in nodes if n.node_key == node_key)
        if request.request_state == RequestState.APPROVED:
            # The dispatcher moves the request to EXECUTING as its first node starts.
            set_request_state(request=request, new_state=RequestState.EXECUTING, actor=actor)
        for state in (NodeState.PREPARING, NodeState.SUBMITTING, NodeState.COMPLETED):
            set_node_state(node=node, new_state=state, actor=actor)
        advance_after_completion(request, node, actor=actor, nodes=nodes)


@pytest.fixture
def waiting_at_gate(integration_client, approver_client) -> dict:
    """A gated movement, approved, whose withdrawal completed: the manual gate waits."""
    response = post_create(
        integration_client,
        {
            "template": "cex_to_cex_gated",
            "asset": "USDC",
            "amount": "5",
            "source": "sandbox-exchange-a",
            "destination": "sandbox-exchange-b",
        },
    )
    movement_id = response.json()["id"]
    approver_client.post(movement_url(movement_id, "approve"))
    complete_node(movement_id, "withdraw")
    return approver_client.get(movement_url(movement_id)).json()


# --- approve ---------------------------------------------------------------------------------


def test_an_operator_approves_a_movement_someone_else_created(created, approver_client):
    response = approver_client.post(movement_url(created["id"], "approve"))

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == created["id"]
    assert body["request_state"] == "APPROVED"
    assert body["approved_by"] == "approver"
    assert body["current_frontier"] == ["withdraw"]


def test_the_creator_cannot_approve_its_own_movement_even_with_the_permission(approver_client):
    own = post_create(approver_client).json()

    response = approver_client.post(movement_url(own["id"], "approve"))

    body = assert_error(response, 403, "permission_denied")
    assert "four-eyes" in body["detail"]
    assert MovementRequest.objects.get(pk=own["id"]).request_state == "PENDING_APPROVAL"


def test_approving_without_the_permission_is_a_403(created):
    viewer = client_for(make_user("viewer", "view_movementrequest"))

    response = viewer.post(movement_url(created["id"], "approve"))

    body = assert_error(response, 403, "permission_denied")
    assert body["details"]["permission"] == "movements.approve_movement"


def test_approving_twice_is_a_409_naming_the_current_state(created, approver_client):
    approver_client.post(movement_url(created["id"], "approve"))
    events_before = MovementEvent.objects.count()

    response = approver_client.post(movement_url(created["id"], "approve"))

    body = assert_error(response, 409, "conflict")
    assert body["details"]["current_state"] == "APPROVED"
    assert "APPROVED" in body["detail"]
    assert MovementEvent.objects.count() == events_before


def test_approving_after_the_window_closed_is_a_409(integration_client, approver_client):
    created = post_create(integration_client).json()
    MovementRequest.objects.filter(pk=created["id"]).update(expires_at="2000-01-01T00:00:00Z")

    response = approver_client.post(movement_url(created["id"], "approve"))

    body = assert_error(response, 409)
    assert body["details"]["current_state"] == "PENDING_APPROVAL"


@pytest.mark.parametrize("action", ["approve", "reject", "cancel", "resume"])
def test_an_action_on_an_unknown_movement_is_a_404(approver_client, action):
    response = post_json(approver_client, movement_url(uuid.uuid4(), action), {"reason": "x"})

    assert_error(response, 404, "not_found")


@pytest.mark.parametrize("action", ["approve", "reject", "cancel", "resume"])
def test_an_action_on_an_id_that_is_not_a_uuid_is_a_404(approver_client, action):
    response = post_json(approver_client, movement_url("not-a-uuid", action), {"reason": "x"})

    assert_error(response, 404, "not_found")


@pytest.mark.parametrize("action", ["approve", "reject", "cancel", "resume"])
def test_an_action_without_a_token_is_a_401(client, created, action):
    response = client.post(movement_url(created["id"], action))

    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"


# --- reject ----------------------------------------------------------------------------------


def test_rejecting_with_a_reason_ends_the_movement(created, approver_client):
    response = post_json(
        approver_client, movement_url(created["id"], "reject"), {"reason": "wrong venue"}
    )

    assert response.status_code == 200
    body = response.json()
    assert body["request_state"] == "REJECTED"
    assert body["failure_reason"] == "wrong venue"
    assert {node["node_state"] for node in body["nodes"]} == {"CANCELLED"}


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"reason": 5}, []])
def test_rejecting_without_a_reason_is_a_400_and_changes_nothing(created, approver_client, body):
    response = post_json(approver_client, movement_url(created["id"], "reject"), body)

    assert_error(response, 400, "invalid")
    assert MovementRequest.objects.get(pk=created["id"]).request_state == "PENDING_APPROVAL"


def test_rejecting_without_the_permission_is_a_403(created, integration_client):
    response = post_json(integration_client, movement_url(created["id"], "reject"), {"reason": "x"})

    assert_error(response, 403, "permission_denied")


def test_rejecting_an_approved_movement_is_a_409(created, approver_client):
    approver_client.post(movement_url(created["id"], "approve"))

    response = post_json(approver_client, movement_url(created["id"], "reject"), {"reason": "x"})

    assert assert_error(response, 409)["details"]["current_state"] == "APPROVED"


def test_a_reject_body_that_is_not_json_is_a_415(created, approver_client):
    response = approver_client.post(
        movement_url(created["id"], "reject"), "reason=x", content_type="text/plain"
    )

    assert_error(response, 415, "unsupported_media_type")


# --- cancel ----------------------------------------------------------------------------------


@pytest.fixture
def executing(created, approver_client) -> dict:
    """Approved, the withdrawal completed, the next observation READY but not started."""
    approver_client.post(movement_url(created["id"], "approve"))
    complete_node(created["id"], "withdraw")
    return approver_client.get(movement_url(created["id"])).json()


def test_cancelling_after_the_withdrawal_needs_the_acknowledgement(executing, approver_client):
    # The withdrawal completed: the funds are in transit.
    response = post_json(
        approver_client, movement_url(executing["id"], "cancel"), {"reason": "changed my mind"}
    )

    body = assert_error(response, 409)
    assert body["code"] == "acknowledgement_required"
    assert body["details"]["completed_side_effects"] == ["withdraw"]
    movement = MovementRequest.objects.get(pk=executing["id"])
    assert movement.request_state == "EXECUTING"


def test_the_acknowledgement_must_be_a_json_boolean(executing, approver_client):
    response = post_json(
        approver_client,
        movement_url(executing["id"], "cancel"),
        {"reason": "x", "acknowledge_funds_in_transit": "true"},
    )

    assert_error(response, 400)


def test_cancelling_an_executing_movement_with_nothing_in_flight(executing, approver_client):
    assert executing["request_state"] == "EXECUTING"

    response = post_json(
        approver_client,
        movement_url(executing["id"], "cancel"),
        {"reason": "changed my mind", "acknowledge_funds_in_transit": True},
    )

    assert response.status_code == 200
    assert MovementRequest.objects.get(pk=executing["id"]).reservation.state == "HELD"
    body = response.json()
    assert body["request_state"] == "CANCELLED"
    states = {node["node_key"]: node["node_state"] for node in body["nodes"]}
    assert states == {
        "withdraw": "COMPLETED",
        "withdraw_observe": "CANCELLED",
        "deposit_observe": "CANCELLED",
    }


def test_cancelling_at_a_manual_gate(waiting_at_gate, approver_client):
    response = post_json(
        approver_client,
        movement_url(waiting_at_gate["id"], "cancel"),
        {"reason": "no", "acknowledge_funds_in_transit": True},
    )

    assert response.status_code == 200
    assert response.json()["request_state"] == "CANCELLED"


def test_cancelling_a_movement_waiting_for_approval_is_a_409(created, approver_client):
    response = post_json(approver_client, movement_url(created["id"], "cancel"), {"reason": "x"})

    body = assert_error(response, 409)
    assert body["details"]["current_state"] == "PENDING_APPROVAL"


def test_cancelling_while_money_is_in_flight_is_a_409(executing, approver_client):
    node = MovementRequest.objects.get(pk=executing["id"]).nodes.get(node_key="withdraw_observe")
    set_node_state(node=node, new_state=NodeState.OBSERVING, actor=Actor.system("tests"))

    response = post_json(approver_client, movement_url(executing["id"], "cancel"), {"reason": "x"})

    body = assert_error(response, 409)
    assert body["details"]["current_state"] == "EXECUTING"
    assert body["details"]["in_flight_nodes"] == ["withdraw_observe"]


def test_cancelling_without_the_permission_is_a_403(executing):
    limited = client_for(make_user("limited", *set(ALL_MOVEMENT_PERMS) - {"cancel_movement"}))

    response = post_json(limited, movement_url(executing["id"], "cancel"), {"reason": "x"})

    assert_error(response, 403, "permission_denied")


# --- resume (manual gate) --------------------------------------------------------------------


def test_resuming_a_waiting_manual_gate_moves_the_frontier_past_it(
    waiting_at_gate, approver_client
):
    assert waiting_at_gate["request_state"] == "WAITING_MANUAL_ACTION"

    response = post_json(
        approver_client, movement_url(waiting_at_gate["id"], "resume"), {"note": "checked"}
    )

    assert response.status_code == 200
    body = response.json()
    assert body["request_state"] == "EXECUTING"
    states = {node["node_key"]: node["node_state"] for node in body["nodes"]}
    assert states["manual_release"] == "COMPLETED"
    assert body["current_frontier"] == ["deposit_observe"]


def test_resuming_the_gate_by_its_key(waiting_at_gate, approver_client):
    response = post_json(
        approver_client,
        movement_url(waiting_at_gate["id"], "resume"),
        {"node_key": "manual_release"},
    )

    assert response.status_code == 200


def test_resuming_a_gate_that_is_not_waiting_is_a_409(waiting_at_gate, approver_client):
    url = movement_url(waiting_at_gate["id"], "resume")
    post_json(approver_client, url, {})

    response = post_json(approver_client, url, {})

    assert assert_error(response, 409)["details"]["current_state"] == "EXECUTING"


def test_resuming_a_movement_waiting_for_approval_is_a_409(created, approver_client):
    response = post_json(approver_client, movement_url(created["id"], "resume"), {})

    assert assert_error(response, 409)["details"]["current_state"] == "PENDING_APPROVAL"


def test_resuming_without_the_permission_is_a_403(waiting_at_gate, integration_client):
    response = post_json(integration_client, movement_url(waiting_at_gate["id"], "resume"), {})

    assert_error(response, 403, "permission_denied")


@pytest.mark.parametrize("body", [{"node_key": "Not A Key"}, {"node_key": 3}, {"note": None}])
def test_a_malformed_resume_body_is_a_400(waiting_at_gate, approver_client, body):
    response = post_json(approver_client, movement_url(waiting_at_gate["id"], "resume"), body)

    assert_error(response, 400, "invalid")


def test_a_409_without_a_state_in_its_details_still_names_the_current_state(
    created, approver_client, monkeypatch
):
    def stale(**kwargs):
        raise StaleState("changed by someone else")

    monkeypatch.setattr("movements.api.views.movement_approve", stale)

    response = approver_client.post(movement_url(created["id"], "approve"))

    body = assert_error(response, 409, "stale_state")
    assert body["details"]["current_state"] == "PENDING_APPROVAL"

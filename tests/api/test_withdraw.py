"""POST /api/v1/movements/{id}/withdraw/: the creator (or a supervisor) takes back a movement
waiting for approval; PENDING_APPROVAL -> REJECTED, reservation RELEASED, the rejection event."""

import json
import uuid

import pytest
from rest_framework.test import APIClient

from access.services import api_token_mint
from callbacks.models import Delivery, Event, Subscription
from movements.models import MovementEvent, MovementRequest
from movements.permissions import SUPERVISOR_PERMISSIONS
from movements.states import RequestState
from tests.api.conftest import assert_error, client_for, movement_url, post_json
from tests.conftest import make_user

REASON = {"reason": "sent to the wrong destination"}


def withdraw(client, movement_id, body=REASON):
    return post_json(client, movement_url(movement_id, "withdraw"), body)


def test_the_creator_withdraws_its_movement_waiting_for_approval(
    created, integration_client, integration
):
    Subscription.objects.create(
        name="bot hook",
        url="https://hooks.example.com/qtg",
        event_types=["request_rejected"],
        owner=integration,
    )

    response = withdraw(integration_client, created["id"])

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["request_state"] == "REJECTED"
    assert body["withdrawn_by"] == "integration"
    assert body["failure_reason"] == REASON["reason"]
    assert body["reservation"]["state"] == "RELEASED"
    movement = MovementRequest.objects.get(pk=created["id"])
    assert movement.request_state == RequestState.REJECTED
    assert movement.withdrawn_by == integration
    transition = MovementEvent.objects.filter(
        request=movement, new_state=RequestState.REJECTED
    ).get()
    assert transition.old_state == RequestState.PENDING_APPROVAL
    assert transition.detail == {"reason": REASON["reason"], "withdrawn_by": "integration"}
    event = Event.objects.get(request=movement, event_type="request_rejected")
    payload = json.loads(event.body)
    assert payload["context"] == {
        "previous_state": "PENDING_APPROVAL",
        "withdrawn_by": "integration",
        "reason": REASON["reason"],
    }
    assert payload["data"]["withdrawn_by"] == "integration"
    assert Delivery.objects.filter(event_id=event.event_id).count() == 1


def test_a_movement_not_withdrawn_says_withdrawn_by_null(created, approver_client):
    rejected = post_json(approver_client, movement_url(created["id"], "reject"), REASON)

    assert rejected.json()["request_state"] == "REJECTED"
    assert rejected.json()["withdrawn_by"] is None
    assert created["withdrawn_by"] is None


def test_a_supervisor_withdraws_someone_elses_movement(created):
    # The supervisors group's permissions (movements.permissions), the view included.
    supervisor = make_user(
        "supervisor",
        *(p.split(".", 1)[1] for p in SUPERVISOR_PERMISSIONS if p.startswith("movements.")),
    )

    response = withdraw(client_for(supervisor), created["id"])

    assert response.status_code == 200, response.content
    assert response.json()["request_state"] == "REJECTED"
    assert response.json()["withdrawn_by"] == "supervisor"


def test_someone_else_without_the_permission_gets_a_403_and_nothing_changes(
    created, approver_client
):
    # The approver may see every movement and reject it, but withdrawing is the creator's.
    events_before = MovementEvent.objects.count()

    response = withdraw(approver_client, created["id"])

    body = assert_error(response, 403, "permission_denied")
    assert body["details"]["permission"] == "movements.withdraw_movement"
    assert MovementRequest.objects.get(pk=created["id"]).request_state == "PENDING_APPROVAL"
    assert MovementEvent.objects.count() == events_before


def test_a_supervisor_token_without_the_decide_scope_cannot_withdraw_someone_elses(created):
    supervisor = make_user("supervisor", "withdraw_movement", "view_movementrequest")
    client = APIClient()
    key = api_token_mint(user=supervisor, actor_label="tests", scopes=["read", "create"]).key
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    response = withdraw(client, created["id"])

    body = assert_error(response, 403, "permission_denied")
    assert body["details"]["scope"] == "decide"
    assert MovementRequest.objects.get(pk=created["id"]).request_state == "PENDING_APPROVAL"


def test_a_movement_the_client_cannot_see_is_a_404(created):
    stranger = client_for(make_user("stranger"))

    response = withdraw(stranger, created["id"])

    assert_error(response, 404, "not_found")
    assert MovementRequest.objects.get(pk=created["id"]).request_state == "PENDING_APPROVAL"


@pytest.mark.parametrize("movement_id", [uuid.uuid4(), "not-a-uuid"])
def test_an_unknown_movement_is_a_404(integration_client, movement_id):
    assert_error(withdraw(integration_client, movement_id), 404, "not_found")


def test_after_approval_withdraw_is_a_409_naming_the_state(
    created, integration_client, approver_client
):
    approver_client.post(movement_url(created["id"], "approve"))
    events_before = MovementEvent.objects.count()

    response = withdraw(integration_client, created["id"])

    body = assert_error(response, 409, "conflict")
    assert body["details"]["current_state"] == "APPROVED"
    assert MovementRequest.objects.get(pk=created["id"]).withdrawn_by is None
    assert MovementEvent.objects.count() == events_before


def test_withdrawing_twice_is_a_409(created, integration_client):
    assert withdraw(integration_client, created["id"]).status_code == 200

    body = assert_error(withdraw(integration_client, created["id"]), 409, "conflict")

    assert body["details"]["current_state"] == "REJECTED"


@pytest.mark.parametrize("body", [{}, {"reason": "   "}, {"reason": 7}])
def test_a_reason_is_required(created, integration_client, body):
    response = withdraw(integration_client, created["id"], body)

    body = assert_error(response, 400, "invalid")
    assert "reason" in body["details"]
    assert MovementRequest.objects.get(pk=created["id"]).request_state == "PENDING_APPROVAL"

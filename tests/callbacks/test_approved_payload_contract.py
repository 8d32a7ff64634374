"""The ``request_approved`` and ``frontier_advanced`` webhooks an approval sends, pinned to what
the published catalogue (``callbacks.events``) and the OpenAPI document's ``webhooks`` section
say they carry: the movement exactly as ``GET /api/v1/movements/{id}/`` showed it when each
happened, plus its ``sequence``, and each event's documented ``context``. An approval that
builds its events from what it already holds (issue 34) must send exactly this."""

import json

import jsonschema
import pytest

from callbacks.events import EVENT_CATALOGUE
from callbacks.models import Delivery, Event, Subscription
from callbacks.services import PAYLOAD_VERSION
from movements.api.serializers import MovementSerializer
from tests.api.conftest import client_for, movement_url, post_create
from tests.conftest import ALL_MOVEMENT_PERMS, make_user

ENVELOPE = {"id", "type", "timestamp", "version", "data", "context"}


@pytest.fixture
def operator_subscription(db):
    return Subscription.objects.create(
        name="all", url="https://hooks.example.com/all", secret="s" * 32, event_types=["*"]
    )


@pytest.fixture
def approver(db):
    return make_user("approver", *ALL_MOVEMENT_PERMS)


@pytest.fixture
def approved(approver, operator_subscription):
    """A movement created and approved through the API; its events by type, as delivered."""
    movement = post_create(client_for(make_user("integration"))).json()
    response = client_for(approver).post(movement_url(movement["id"], "approve"))
    assert response.status_code == 200, response.content
    events = {
        event.event_type: event
        for event in Event.objects.filter(request_id=movement["id"]).order_by("sequence")
    }
    return movement, events, response.json()


def webhook_schema(client, event_type: str) -> dict:
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    body = schema["webhooks"][event_type]["post"]["requestBody"]["content"]["application/json"]
    # The body's schema refers into the document's components: validate against the document.
    return {**body["schema"], "components": schema["components"]}


def body_of(event: Event) -> dict:
    return json.loads(event.body)


def test_request_approved_carries_the_documented_envelope_and_context(approved):
    _, events, _ = approved
    body = body_of(events["request_approved"])

    assert set(body) == ENVELOPE
    assert body["type"] == "request_approved"
    assert body["version"] == PAYLOAD_VERSION
    assert body["id"] == str(events["request_approved"].event_id)
    documented = EVENT_CATALOGUE["request_approved"]["context"]
    assert set(body["context"]) == set(documented) == {"previous_state"}
    assert body["context"] == {"previous_state": "PENDING_APPROVAL"}


def test_request_approved_data_is_the_movement_as_the_api_showed_it_when_approved(
    approved, approver
):
    movement, events, answered = approved
    data = body_of(events["request_approved"])["data"]

    assert set(data) == {*MovementSerializer.Meta.fields, "sequence"}
    assert data["sequence"] == events["request_approved"].sequence
    assert data["id"] == movement["id"]
    assert data["request_state"] == "APPROVED"
    assert data["approved_by"] == approver.username
    assert data["approved_at"] == answered["approved_at"]
    assert [a["by"] for a in data["approvals"]] == [approver.username]
    assert data["approvals"] == answered["approvals"]
    assert data["reservation"] == movement["reservation"] == {"state": "HELD", "amount": "100.5"}
    assert data["created_by"] == movement["created_by"]
    assert data["withdrawn_by"] is None and data["failure_reason"] is None
    assert data["attention"] == []
    # Approved, before its first nodes woke: every node still BLOCKED, nothing on the frontier.
    assert [(n["node_key"], n["node_state"]) for n in data["nodes"]] == [
        (n["node_key"], "BLOCKED") for n in movement["nodes"]
    ]
    assert data["current_frontier"] == []
    for same in ("template", "template_version", "asset", "amount", "source", "destination"):
        assert data[same] == movement[same], same
    assert data["params"] == movement["params"]
    assert data["expires_at"] == movement["expires_at"]
    assert data["created_at"] == movement["created_at"]
    assert movement["updated_at"] < data["updated_at"] <= answered["updated_at"]


def test_frontier_advanced_follows_with_the_woken_nodes(approved):
    movement, events, answered = approved
    approved_event, advanced = events["request_approved"], events["frontier_advanced"]
    body = body_of(advanced)

    assert advanced.sequence == approved_event.sequence + 1
    assert set(body) == ENVELOPE
    assert set(body["context"]) <= set(EVENT_CATALOGUE["frontier_advanced"]["context"])
    assert body["context"] == {"woken": ["withdraw"], "frontier": ["withdraw"], "cause": "approved"}
    data = body["data"]
    assert set(data) == {*MovementSerializer.Meta.fields, "sequence"}
    assert data["sequence"] == advanced.sequence
    assert data["request_state"] == "APPROVED"
    assert data["current_frontier"] == ["withdraw"]
    states = {n["node_key"]: n["node_state"] for n in data["nodes"]}
    assert states["withdraw"] == "READY"
    assert {k: v for k, v in states.items() if k != "withdraw"} == {
        n["node_key"]: "BLOCKED" for n in movement["nodes"] if n["node_key"] != "withdraw"
    }
    # The last event shows the movement as the API answers after the approval.
    assert {k: v for k, v in data.items() if k != "sequence"} == answered


@pytest.mark.parametrize("event_type", ["request_approved", "frontier_advanced"])
def test_each_event_validates_against_the_published_webhook_schema(approved, client, event_type):
    _, events, _ = approved
    schema = webhook_schema(client, event_type)

    jsonschema.validate(body_of(events[event_type]), schema)


def test_each_delivery_sends_the_events_body(approved, operator_subscription):
    _, events, _ = approved

    for event_type in ("request_approved", "frontier_advanced"):
        delivery = Delivery.objects.get(subscription=operator_subscription, event_type=event_type)
        assert delivery.body == events[event_type].body
        assert delivery.event_id == events[event_type].event_id

"""Contract v1.2 events: a movement created, waiting for approval (n of m), waiting at a manual
gate, in manual intervention, a node needing attention; ``event_types: ["*"]``; and the
catalogue in the OpenAPI document's ``webhooks`` section."""

import json
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from callbacks.events import EVENT_CATALOGUE, EVENT_TYPES
from callbacks.models import Delivery, Event, Subscription
from movements.models import MovementRequest
from movements.selectors import current_nodes
from movements.services import set_request_state
from movements.services.approvals import approval_policy_activate, approval_policy_propose
from movements.services.attention import attention_raise
from movements.states import RequestState
from qtg.core.actors import Actor
from tests.api.conftest import (
    assert_error,
    client_for,
    create_body,
    movement_url,
    post_create,
    post_json,
)
from tests.api.test_actions import complete_node
from tests.conftest import make_user

WEBHOOKS = "/api/v1/webhooks/"


def events_of(movement_id) -> list[tuple[str, dict]]:
    """The movement's events in order: (type, context)."""
    return [
        (event.event_type, json.loads(event.body)["context"])
        for event in Event.objects.filter(request_id=movement_id).order_by("sequence")
    ]


def types_of(movement_id) -> list[str]:
    return [event_type for event_type, _ in events_of(movement_id)]


def test_a_created_movement_says_so_and_that_it_waits_for_one_approval(integration_client):
    movement = post_create(integration_client).json()

    events = events_of(movement["id"])

    assert events[0] == ("request_created", {})
    first = Event.objects.get(request_id=movement["id"], event_type="request_created")
    assert first.sequence == 1
    assert (
        "approval_pending",
        {
            "previous_state": "VALIDATED",
            "approvals_required": 1,
            "approvals_received": 0,
        },
    ) in events


def test_a_movement_refused_at_creation_is_created_then_failed(integration_client):
    refused = post_create(integration_client, create_body(params={"colour": "blue"})).json()

    assert refused["request_state"] == "FAILED"
    assert types_of(refused["id"]) == ["request_created", "request_failed"]


def test_each_approval_short_of_the_quorum_says_how_many_it_has(integration_client):
    alice = make_user("alice", "propose_approvalpolicy", "decide_approvalpolicy")
    carol = make_user("carol", "propose_approvalpolicy", "decide_approvalpolicy")
    proposed = approval_policy_propose(actor=Actor.for_user(alice), key="two", approvals_required=2)
    approval_policy_activate(policy=proposed, actor=Actor.for_user(carol))
    movement = post_create(integration_client).json()
    first = make_user("first", "approve_movement", "view_movementrequest")
    second = make_user("second", "approve_movement", "view_movementrequest")
    client_for(first).post(movement_url(movement["id"], "approve"))
    pending = [ctx for kind, ctx in events_of(movement["id"]) if kind == "approval_pending"]
    assert [(c["approvals_required"], c["approvals_received"]) for c in pending] == [
        (2, 0),
        (2, 1),
    ]
    client_for(second).post(movement_url(movement["id"], "approve"))

    assert types_of(movement["id"])[-1] in ("request_approved", "frontier_advanced")
    assert "request_approved" in types_of(movement["id"])
    assert len([t for t in types_of(movement["id"]) if t == "approval_pending"]) == 2


def test_a_movement_at_a_manual_gate_says_it_waits_for_a_manual_action(
    integration_client, approver_client
):
    movement = post_create(integration_client, {**_gated(), "amount": "5"}).json()
    approver_client.post(movement_url(movement["id"], "approve"))

    complete_node(movement["id"], "withdraw")

    events = events_of(movement["id"])
    assert ("request_attention", {"previous_state": "EXECUTING"}) in events
    assert ("request_waiting_manual_action", {"previous_state": "EXECUTING"}) in events
    assert "request_manual_intervention" not in types_of(movement["id"])


def test_a_movement_in_manual_intervention_says_so(integration_client, approver_client):
    movement = post_create(integration_client).json()
    approver_client.post(movement_url(movement["id"], "approve"))
    actor = Actor.system("tests-worker")
    with transaction.atomic():
        request = MovementRequest.objects.select_for_update().get(pk=movement["id"])
        set_request_state(request=request, new_state=RequestState.EXECUTING, actor=actor)
        set_request_state(request=request, new_state=RequestState.MANUAL_INTERVENTION, actor=actor)

    events = events_of(movement["id"])
    assert ("request_attention", {"previous_state": "EXECUTING"}) in events
    assert ("request_manual_intervention", {"previous_state": "EXECUTING"}) in events
    assert "request_waiting_manual_action" not in types_of(movement["id"])


def test_a_node_needing_attention_says_which_node(integration_client, approver_client):
    movement = post_create(integration_client).json()
    approver_client.post(movement_url(movement["id"], "approve"))
    since = timezone.now()
    with transaction.atomic():
        request = MovementRequest.objects.select_for_update().get(pk=movement["id"])
        node = next(n for n in current_nodes(request) if n.node_key == "withdraw")
        attention_raise(
            request=request,
            node=node,
            reason="stuck",
            message="withdraw has been waiting",
            since=since,
            actor=Actor.system("tests"),
        )

    [(_, context)] = [e for e in events_of(movement["id"]) if e[0] == "node_attention"]
    assert context["node_key"] == "withdraw"
    assert context["attention"] == "stuck"
    assert context["message"] == "withdraw has been waiting"
    # request_attention is sent as before, for existing subscribers.
    assert "request_attention" in types_of(movement["id"])


def test_a_subscription_to_star_receives_every_event_type(integration, integration_client):
    response = post_json(
        integration_client,
        WEBHOOKS,
        {"url": "https://hooks.example.com/all", "event_types": ["*"]},
    )
    assert response.status_code == 201, response.content
    assert response.json()["event_types"] == ["*"]
    subscription = Subscription.objects.get(pk=response.json()["id"])

    movement = post_create(integration_client).json()

    delivered = set(
        Delivery.objects.filter(subscription=subscription).values_list("event_type", flat=True)
    )
    assert delivered == set(types_of(movement["id"])) == {"request_created", "approval_pending"}
    assert all(subscription.wants(event_type) for event_type in EVENT_TYPES)
    assert not subscription.wants("webhook_test")


def test_an_unknown_event_type_is_still_refused(integration_client):
    response = post_json(
        integration_client,
        WEBHOOKS,
        {"url": "https://hooks.example.com/all", "event_types": ["request_*"]},
    )

    body = assert_error(response, 400, "invalid")
    assert "event_types" in body["details"]


def test_a_client_cannot_subscribe_to_the_operators_audit_checkpoints(integration_client):
    # They go to operators' subscriptions only: accepting the type would promise a delivery
    # that never comes.
    response = post_json(
        integration_client,
        WEBHOOKS,
        {"url": "https://hooks.example.com/all", "event_types": ["audit.checkpoint"]},
    )

    body = assert_error(response, 400, "invalid")
    assert "event_types" in body["details"]
    assert not Subscription.objects.exists()


@pytest.mark.django_db
def test_the_schema_catalogues_every_event_in_its_webhooks_section(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    webhooks = schema["webhooks"]
    assert set(webhooks) == set(EVENT_TYPES)
    for event_type, entry in EVENT_CATALOGUE.items():
        operation = webhooks[event_type]["post"]
        assert entry["when"] in operation["description"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"].startswith("#/components/schemas/")
        name = body["$ref"].rsplit("/", 1)[1]
        properties = schema["components"]["schemas"][name]["properties"]
        assert properties["type"]["enum"] == [event_type]
        context = _resolve(schema, properties["context"])
        assert set(entry["context"]) <= set(context.get("properties", {}))


def _resolve(schema, node):
    while "$ref" in node or "allOf" in node:
        if "allOf" in node:
            (node,) = node["allOf"]
            continue
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _gated() -> dict:
    return {
        "template": "cex_to_cex_gated",
        "asset": "USDC",
        "source": "sandbox-exchange-a",
        "destination": "sandbox-exchange-b",
    }


def test_the_readme_catalogues_every_event_type_with_its_context():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()

    for event_type, entry in EVENT_CATALOGUE.items():
        [row] = [line for line in readme.splitlines() if line.startswith(f"| `{event_type}` |")]
        for field in entry["context"]:
            assert f"`{field}`" in row, (event_type, field)


def test_the_readme_integrator_section_documents_discovery_events_and_withdraw():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## The integration API", 1)[1].split("\n## ", 1)[0]

    for documented in (
        "GET /api/v1/templates/",
        "GET /api/v1/venues/",
        "POST /api/v1/movements/{id}/withdraw/",
        "GET /api/v1/events/",
        "webhooks",
        '"event_types": ["*"]',
    ):
        assert documented in section, documented

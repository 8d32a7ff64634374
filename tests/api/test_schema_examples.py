"""The OpenAPI document's examples are real: each one validates against the schema it
illustrates (request bodies, responses, problems, and every webhook payload of the event
catalogue), so a client or a mock server built from them sees what QTG sends; and the events
QTG really sends validate against the catalogue's schemas."""

import json

import pytest
from django.db import transaction
from django.utils import timezone
from jsonschema import Draft202012Validator  # schemathesis' own validator (a dev dependency)
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from callbacks.events import CLIENT_EVENT_TYPES, EVENT_CATALOGUE
from callbacks.models import Event
from movements.models import MovementRequest
from movements.selectors import current_nodes
from movements.services import set_request_state
from movements.services.attention import attention_raise
from movements.states import RequestState
from qtg.core.actors import Actor
from tests.api.conftest import create_body, movement_url, post_create, post_json
from tests.api.test_actions import complete_node

SCHEMA = "/api/schema/"


@pytest.fixture
def document(client, db):
    return client.get(SCHEMA, HTTP_ACCEPT="application/vnd.oai.openapi+json").json()


def published_examples(document):
    """(where, schema, example) for every example of every operation and webhook."""

    def of_content(where, content):
        for media_type, media in content.items():
            for name, example in (media.get("examples") or {}).items():
                yield f"{where} {media_type} {name}", media["schema"], example["value"]

    for path, item in document["paths"].items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            body = operation.get("requestBody", {}).get("content", {})
            yield from of_content(f"{where} request", body)
            for status, response in operation["responses"].items():
                yield from of_content(f"{where} {status}", response.get("content", {}))
    for event_type, item in document["webhooks"].items():
        body = item["post"]["requestBody"]["content"]
        yield from of_content(f"webhook {event_type}", body)


DOCUMENT_URI = "urn:qtg:openapi"


def validator_for(document, schema):
    """A validator of ``schema`` whose "#/components/..." references resolve in the document."""

    def anchored(node):
        if isinstance(node, dict):
            return {
                key: f"{DOCUMENT_URI}{value}" if key == "$ref" else anchored(value)
                for key, value in node.items()
            }
        if isinstance(node, list):
            return [anchored(value) for value in node]
        return node

    registry = Registry().with_resource(
        DOCUMENT_URI, Resource.from_contents(document, default_specification=DRAFT202012)
    )
    return Draft202012Validator(
        anchored(schema), registry=registry, format_checker=Draft202012Validator.FORMAT_CHECKER
    )


def test_every_published_example_validates_against_its_schema(document):
    examples = list(published_examples(document))
    problems = [
        f"{where}: {error.json_path}: {error.message}"
        for where, schema, value in examples
        for error in validator_for(document, schema).iter_errors(value)
    ]

    assert not problems, "\n".join(problems)
    # Every operation and every event type has at least one.
    assert {where.split(" ")[1] for where, _, _ in examples if where.startswith("webhook")} == set(
        document["webhooks"]
    )
    assert len(examples) > 200


def test_every_problem_example_carries_a_code_its_response_documents(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                content = response.get("content", {}).get("application/problem+json")
                if content is None:
                    continue
                for example in content["examples"].values():
                    value = example["value"]
                    assert value["status"] == int(status), (method, path, status)
                    assert f"`{value['code']}`" in response["description"], (method, path, status)


def test_a_movement_action_does_not_document_codes_it_cannot_return(document):
    approve = document["paths"]["/api/v1/movements/{id}/approve/"]["post"]["responses"]
    create = document["paths"]["/api/v1/movements/"]["post"]["responses"]

    assert "idempotency_in_progress" not in approve["409"]["description"]
    assert "Codes: `idempotency_in_progress`." in create["409"]["description"]
    assert "Retry-After" in create["409"]["headers"]


def test_every_event_a_movement_sends_validates_against_its_catalogue_entry(
    document, integration_client, approver_client
):
    # Given movements through every kind of moment: created and waiting for approval,
    # approved, nodes completing (the frontier advances) up to COMPLETED, a node needing
    # attention, a manual gate waiting, manual intervention, a withdrawal, a rejection, a
    # cancellation, a movement FAILED at creation.
    flowing = post_create(integration_client).json()["id"]
    approver_client.post(movement_url(flowing, "approve"))
    with transaction.atomic():
        request = MovementRequest.objects.select_for_update().get(pk=flowing)
        node = next(n for n in current_nodes(request) if n.node_key == "withdraw")
        attention_raise(
            request=request,
            node=node,
            reason="stuck",
            message="withdraw has been waiting",
            since=timezone.now(),
            actor=Actor.system("tests"),
        )
    for node_key in ("withdraw", "withdraw_observe", "deposit_observe"):
        complete_node(flowing, node_key)
    gated = post_create(integration_client, create_body(template="cex_to_cex_gated")).json()["id"]
    approver_client.post(movement_url(gated, "approve"))
    complete_node(gated, "withdraw")
    post_json(
        approver_client,
        movement_url(gated, "cancel"),
        {"reason": "changed plans", "acknowledge_funds_in_transit": True},
    )
    stuck = post_create(integration_client).json()["id"]
    approver_client.post(movement_url(stuck, "approve"))
    with transaction.atomic():
        request = MovementRequest.objects.select_for_update().get(pk=stuck)
        actor = Actor.system("tests-worker")
        set_request_state(request=request, new_state=RequestState.EXECUTING, actor=actor)
        set_request_state(request=request, new_state=RequestState.MANUAL_INTERVENTION, actor=actor)
    withdrawn = post_create(integration_client).json()["id"]
    post_json(integration_client, movement_url(withdrawn, "withdraw"), {"reason": "wrong amount"})
    post_create(integration_client, create_body(params={"colour": "blue"}))  # FAILED at once
    rejected = post_create(integration_client).json()["id"]
    post_json(approver_client, movement_url(rejected, "reject"), {"reason": "not budgeted"})

    # When every event they caused is read back as its webhook body
    bodies = [json.loads(body) for body in Event.objects.values_list("body", flat=True)]

    # Then each validates against the schema of its type in the webhooks section.
    problems = [
        f"{body['type']}: {error.json_path}: {error.message}"
        for body in bodies
        for error in validator_for(
            document,
            document["webhooks"][body["type"]]["post"]["requestBody"]["content"][
                "application/json"
            ]["schema"],
        ).iter_errors(body)
    ]
    assert not problems, "\n".join(problems)
    # and carries no context field the catalogue does not document.
    undocumented = {
        (body["type"], name)
        for body in bodies
        for name in body["context"]
        if name not in EVENT_CATALOGUE[body["type"]]["context"]
    }
    assert not undocumented
    assert {body["type"] for body in bodies} == set(CLIENT_EVENT_TYPES) - {"request_expired"}

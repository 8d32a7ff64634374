"""The OpenAPI document's examples are real: each one validates against the schema it
illustrates (request bodies, responses, problems, and every webhook payload of the event
catalogue), so a client or a mock server built from them sees what QTG sends."""

import pytest
from jsonschema import Draft202012Validator  # schemathesis' own validator (a dev dependency)
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

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

"""Contract v1.2: one version everywhere, always-present fields required, Retry-After where a
retry is the answer, and failures (a bug, the database down) as problem documents with a
request id, never HTML; the schema refuses anonymous callers like the API (401)."""

import json

import pytest
from django.db import OperationalError

from access.authentication import ApiTokenAuthentication
from qtg.core.contract import CONTRACT_HEADER, CONTRACT_VERSION
from qtg.core.errors import IdempotencyInProgress
from tests.api.conftest import MOVEMENTS, assert_error, post_create

SCHEMA = "/api/schema/"
JSON_SCHEMA = {"HTTP_ACCEPT": "application/vnd.oai.openapi+json"}


@pytest.fixture
def schema(client, db):
    return client.get(SCHEMA, **JSON_SCHEMA).json()


def test_the_contract_version_is_one_constant_for_schema_payloads_and_headers(
    schema, integration_client
):
    assert CONTRACT_VERSION == "1.2"
    assert schema["info"]["version"] == CONTRACT_VERSION
    response = integration_client.get(MOVEMENTS)
    assert response[CONTRACT_HEADER] == CONTRACT_VERSION
    from callbacks.services import PAYLOAD_VERSION, USER_AGENT

    assert PAYLOAD_VERSION == CONTRACT_VERSION
    assert USER_AGENT.endswith("/" + CONTRACT_VERSION)


@pytest.mark.parametrize(
    ("component", "fields"),
    [
        (
            "Movement",
            {"approvals_required", "created_at", "expires_at", "approved_at", "withdrawn_by"},
        ),
        ("MovementNode", {"node_state", "attempt", "has_side_effect", "state_changed_at"}),
        ("MovementEvent", {"kind", "created_at", "actor_id"}),
        ("Delivery", {"status", "attempts", "created_at"}),
    ],
)
def test_always_present_fields_are_required(schema, component, fields):
    assert fields <= set(schema["components"]["schemas"][component]["required"])


def test_a_problem_says_its_detail_once(schema, integration_client):
    problem = schema["components"]["schemas"]["Problem"]
    assert "message" not in problem["properties"]
    assert set(problem["required"]) == set(problem["properties"])

    body = assert_error(integration_client.get(f"{MOVEMENTS}?state=FAILED"), 400, "invalid")

    assert "message" not in body


def test_idempotency_in_progress_says_when_to_retry(integration_client, monkeypatch):
    def in_progress(**kwargs):
        raise IdempotencyInProgress("a request with this key is still being processed")

    monkeypatch.setattr("movements.api.views.movement_create", in_progress)

    response = post_create(integration_client)

    assert_error(response, 409, "idempotency_in_progress")
    assert int(response["Retry-After"]) >= 1


def test_a_throttled_client_is_told_when_to_retry(integration_client, settings):
    settings.QTG_API_THROTTLE_USER = "2/minute"
    from django.core.cache import cache

    cache.clear()
    statuses = [integration_client.get(MOVEMENTS).status_code for _ in range(3)]

    assert statuses[-1] == 429
    response = integration_client.get(MOVEMENTS)
    assert_error(response, 429)
    assert int(response["Retry-After"]) >= 1
    cache.clear()


def test_the_database_down_is_a_503_problem_with_a_request_id(integration_client, monkeypatch):
    def down(self, key):
        raise OperationalError("could not connect to server: Connection refused")

    monkeypatch.setattr(ApiTokenAuthentication, "authenticate_credentials", down)

    response = integration_client.get(MOVEMENTS)

    body = assert_error(response, 503, "service_unavailable")
    assert int(response["Retry-After"]) >= 1
    assert body["details"]["request_id"] == response["X-Request-ID"]
    assert "Connection refused" not in json.dumps(body)


def test_an_unhandled_failure_is_a_500_problem_with_a_request_id(integration_client, monkeypatch):
    def bug(user):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("movements.api.views.movements_visible_to", bug)

    response = integration_client.get(MOVEMENTS)

    body = assert_error(response, 500, "server_error")
    assert body["details"]["request_id"] == response["X-Request-ID"]
    assert "division" not in json.dumps(body)


def test_an_unknown_api_path_is_a_problem_not_html(integration_client):
    response = integration_client.get("/api/v1/no-such-thing/")

    assert_error(response, 404, "not_found")


@pytest.mark.django_db
def test_the_schema_refuses_anonymous_callers_like_the_api_when_the_deployment_says_so(
    client, settings
):
    settings.QTG_API_DOCS_REQUIRE_LOGIN = True

    response = client.get(SCHEMA)

    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.django_db
def test_the_schema_is_public_when_the_deployment_says_so(client, settings):
    settings.QTG_API_DOCS_REQUIRE_LOGIN = False

    assert client.get(SCHEMA, **JSON_SCHEMA).status_code == 200


def test_every_operation_documents_the_problems_any_operation_may_answer(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for status in ("400", "401", "403", "404", "413", "429", "500", "503"):
                response = operation["responses"].get(status)
                assert response is not None, f"{method} {path} {status}"
                assert list(response["content"]) == ["application/problem+json"]
                assert "Codes: `" in response["description"], f"{method} {path} {status}"
    create = schema["paths"][MOVEMENTS]["post"]["responses"]
    assert "`idempotency_in_progress`" in create["409"]["description"]
    assert "`idempotency_key_reused`" in create["422"]["description"]


def test_a_body_over_the_limit_is_a_413_problem(integration_client, settings):
    settings.QTG_API_MAX_BODY_BYTES = 1024

    response = post_create(integration_client, {"template": "x" * 2000})

    assert_error(response, 413, "payload_too_large")

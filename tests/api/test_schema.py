"""The OpenAPI schema validates, is served, and its docs page needs no internet."""

import re
from io import StringIO

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command

from tests.api.conftest import MOVEMENTS
from tests.conftest import make_user

# Operation ids are part of the contract (generated clients name their methods after them).
OPERATIONS = {
    ("/api/v1/route-templates/", "get"): "route_templates_list",
    ("/api/v1/templates/", "get"): "templates_list",
    ("/api/v1/venues/", "get"): "venues_list",
    ("/api/v1/movements/", "get"): "movements_list",
    ("/api/v1/movements/", "post"): "movements_create",
    ("/api/v1/movements/{id}/", "get"): "movements_retrieve",
    ("/api/v1/movements/{id}/approve/", "post"): "movements_approve",
    ("/api/v1/movements/{id}/reject/", "post"): "movements_reject",
    ("/api/v1/movements/{id}/cancel/", "post"): "movements_cancel",
    ("/api/v1/movements/{id}/withdraw/", "post"): "movements_withdraw",
    ("/api/v1/movements/{id}/resume/", "post"): "movements_resume",
    ("/api/v1/movements/{id}/events/", "get"): "movements_events",
    ("/api/v1/events/", "get"): "events_list",
    ("/api/v1/webhooks/", "get"): "webhooks_list",
    ("/api/v1/webhooks/", "post"): "webhooks_create",
    ("/api/v1/webhooks/{id}/", "get"): "webhooks_retrieve",
    ("/api/v1/webhooks/{id}/", "patch"): "webhooks_update",
    ("/api/v1/webhooks/{id}/", "delete"): "webhooks_destroy",
    ("/api/v1/webhooks/{id}/test/", "post"): "webhooks_test",
    ("/api/v1/webhooks/{id}/rotate-secret/", "post"): "webhooks_rotate_secret",
    ("/api/v1/webhooks/{id}/deliveries/", "get"): "webhooks_deliveries",
    (
        "/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver/",
        "post",
    ): "webhooks_redeliver",
}


@pytest.mark.django_db
def test_the_schema_validates_without_warnings():
    out = StringIO()

    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)

    schema = yaml.safe_load(out.getvalue())
    assert schema["openapi"].startswith("3.")


@pytest.mark.django_db
def test_the_schema_is_served_and_documents_every_operation(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    schema = response.json()
    operations = {
        (path, method): operation["operationId"]
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }
    assert operations == OPERATIONS
    assert schema["components"]["securitySchemes"]["tokenAuth"]["name"] == "Authorization"
    create = schema["paths"][MOVEMENTS]["post"]
    header = next(p for p in create["parameters"] if p["in"] == "header")
    assert (header["name"], header["required"]) == ("Idempotency-Key", True)
    amount = schema["components"]["schemas"]["MovementCreateInput"]["properties"]["amount"]
    assert amount["type"] == "string" and amount["pattern"]


@pytest.mark.django_db
def test_the_docs_page_loads_its_assets_from_this_server(client):
    response = client.get("/api/docs/")

    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css|png))"', html)
    assert assets, html
    for asset in assets:
        assert asset.startswith("/static/"), asset
        assert finders.find(asset.removeprefix("/static/")), asset
    assert not re.search(r"https?://", html), "the docs page must not reach the internet"


@pytest.mark.django_db
def test_api_token_create_makes_a_token_the_api_accepts(client):
    make_user("treasury-bot")
    out = StringIO()

    call_command("api_token_create", "treasury-bot", stdout=out)

    key = out.getvalue().strip()
    assert client.get(MOVEMENTS, HTTP_AUTHORIZATION=f"Token {key}").status_code == 200


@pytest.mark.django_db
def test_every_operation_has_examples_problem_responses_and_a_429(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    for path, item in schema["paths"].items():
        for method, operation in item.items():
            where = f"{method} {path}"
            responses = operation["responses"]
            assert "429" in responses, where
            problem = responses["429"]["content"]
            assert list(problem) == ["application/problem+json"], where
            examples = [
                content.get("examples")
                for response in responses.values()
                for content in response.get("content", {}).values()
            ]
            examples += [
                content.get("examples")
                for content in operation.get("requestBody", {}).get("content", {}).values()
            ]
            assert any(examples), where
    problem = schema["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail", "code", "details"} <= set(problem["required"])


@pytest.mark.django_db
def test_the_schema_declares_the_replay_header_and_describes_the_webhooks(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    create = schema["paths"][MOVEMENTS]["post"]
    assert "Idempotency-Replayed" in create["responses"]["200"]["headers"]
    assert "422" in create["responses"]
    callbacks = schema["paths"]["/api/v1/webhooks/"]["post"]["callbacks"]
    (event,) = callbacks["movement_event"].values()
    description = event["post"]["description"]
    for header in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        assert header in description
    payload = schema["components"]["schemas"]["Event"]["properties"]
    assert {"type", "timestamp", "data", "version"} <= set(payload)

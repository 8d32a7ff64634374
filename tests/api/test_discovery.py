"""Templates and venues are strings in the schema (a pattern and examples, never an enum of what
this deployment knows) and are discovered at run time: GET /api/v1/templates/ and /venues/."""

import pytest

from qtg.core import venues as core_venues
from tests.api.conftest import assert_error, create_body, post_create

SCHEMA = "/api/schema/"


@pytest.fixture
def schema(client, db):
    return client.get(SCHEMA, HTTP_ACCEPT="application/vnd.oai.openapi+json").json()


@pytest.mark.parametrize("field", ["template", "source", "destination"])
def test_templates_and_venues_are_strings_with_a_pattern_and_examples(schema, field):
    prop = schema["components"]["schemas"]["MovementCreateInput"]["properties"][field]

    assert prop["type"] == "string"
    assert prop["pattern"].startswith("^")
    assert prop["examples"]
    assert "enum" not in prop and "anyOf" not in prop and "$ref" not in prop
    assert "VenueEnum" not in schema["components"]["schemas"]
    assert "TemplateEnum" not in schema["components"]["schemas"]


def test_templates_are_discovered_with_their_params(integration_client):
    response = integration_client.get("/api/v1/templates/")

    assert response.status_code == 200
    templates = {t["key"]: t for t in response.json()}
    cex = templates["cex_to_cex"]
    assert cex["version"] >= 1 and cex["description"]
    assert {"name": "network", "type": "string", "required": False}.items() <= (
        next(p for p in cex["params"] if p["name"] == "network").items()
    )
    assert "assets" in cex
    assert cex["nodes"][0]["key"] == "withdraw"


def test_venues_are_discovered_with_their_kind_and_assets(integration_client):
    core_venues.provide_venues(
        ["disc-treasury"],
        details={
            "disc-treasury": {
                "kind": "chain_account",
                "chain": "ethereum",
                "chain_kind": "evm",
                "exchange": None,
                "assets": ["ETH", "USDC"],
            }
        },
    )
    try:
        response = integration_client.get("/api/v1/venues/")
    finally:
        core_venues._provided.discard("disc-treasury")
        core_venues._details.pop("disc-treasury", None)

    assert response.status_code == 200
    by_name = {v["name"]: v for v in response.json()}
    assert by_name["sandbox-exchange-a"]["kind"] == "listed"
    assert by_name["disc-treasury"] == {
        "name": "disc-treasury",
        "kind": "chain_account",
        "chain": "ethereum",
        "chain_kind": "evm",
        "exchange": None,
        "assets": ["ETH", "USDC"],
    }


def test_discovery_needs_a_token(client, db):
    assert_error(client.get("/api/v1/templates/"), 401)
    assert_error(client.get("/api/v1/venues/"), 401)


def test_a_template_the_schema_allows_but_the_server_does_not_know_is_a_400(integration_client):
    response = post_create(integration_client, create_body(template="no_such_template"))

    body = assert_error(response, 400, "invalid")
    assert "templates" in body["details"]["template"][0]


def test_a_template_given_as_a_string_creates(integration_client):
    assert post_create(integration_client, create_body(template="cex_to_cex")).status_code == 201

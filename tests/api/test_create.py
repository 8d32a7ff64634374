"""POST /api/v1/movements/: create, validation, and idempotency."""

import json
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.conf import settings

from callbacks.models import Event
from movements.models import MovementEvent, MovementRequest
from tests.api.conftest import MOVEMENTS, assert_error, client_for, create_body, post_create
from tests.conftest import make_user

CONTRACT_FIELDS = {
    "id",
    "request_state",
    "template",
    "asset",
    "amount",
    "current_frontier",
    "expires_at",
    "created_at",
    "reservation",
    "nodes",
}
NODE_FIELDS = {"node_key", "kind", "node_state", "has_side_effect", "attempt", "external_ref"}


def test_creating_a_movement_returns_201_with_the_contract_fields(integration_client):
    response = post_create(integration_client)

    assert response.status_code == 201
    body = response.json()
    assert set(body) >= CONTRACT_FIELDS
    assert body["request_state"] == "PENDING_APPROVAL"
    assert body["template"] == "cex_to_cex"
    assert body["asset"] == "USDC"
    assert body["amount"] == "100.5"
    assert body["nodes"] and all(set(node) >= NODE_FIELDS for node in body["nodes"])
    assert {node["node_state"] for node in body["nodes"]} == {"BLOCKED"}
    assert MovementRequest.objects.get(pk=body["id"]).amount == Decimal("100.50")


def test_the_amount_keeps_every_decimal_place_it_was_given(integration_client):
    response = post_create(integration_client, create_body(amount="0.000000000000000001"))

    assert response.status_code == 201
    assert response.json()["amount"] == "0.000000000000000001"


def test_the_asset_is_stored_upper_case(integration_client):
    response = post_create(integration_client, create_body(asset="usdc"))

    assert response.json()["asset"] == "USDC"


def test_expires_in_seconds_sets_the_approval_window(integration_client):
    response = post_create(integration_client, create_body(expires_in_seconds=600))

    body = response.json()
    created_at = datetime.fromisoformat(body["created_at"])
    assert datetime.fromisoformat(body["expires_at"]) - created_at == timedelta(seconds=600)


@pytest.mark.parametrize(
    ("amount", "why"),
    [
        (0.1, "a JSON float"),
        (100, "a JSON integer"),
        ("0", "zero"),
        ("0.0", "zero with decimals"),
        ("-5", "negative"),
        ("1e3", "an exponent"),
        ("1E+2", "an exponent"),
        (" 100", "whitespace"),
        ("100\n", "a trailing newline"),
        ("0100", "a leading zero"),
        ("1.0000000000000000001", "19 decimal places"),
        ("100000000000000000000", "1e20"),
        ("9" * 400, "hundreds of digits"),
        ("NaN", "not a number"),
        ("Infinity", "infinite"),
        ("", "empty"),
        (None, "null"),
        (True, "a boolean"),
        (["1"], "a list"),
    ],
)
def test_an_amount_that_is_not_a_positive_decimal_string_is_a_400(integration_client, amount, why):
    response = post_create(integration_client, create_body(amount=amount))

    body = assert_error(response, 400, "invalid")
    assert "amount" in body["details"], why
    assert not MovementRequest.objects.exists()


@pytest.mark.postgres
def test_on_postgresql_the_largest_amount_below_1e20_is_kept_exactly(integration_client):
    amount = "9" * 20 + "." + "9" * 18

    response = post_create(integration_client, create_body(amount=amount))

    assert response.status_code == 201
    assert response.json()["amount"] == amount


@pytest.mark.postgres
def test_on_postgresql_amounts_differing_in_the_38th_digit_are_different_bodies(
    integration_client,
):
    post_create(integration_client, create_body(amount="9" * 20 + "." + "9" * 18), key="k")

    again = post_create(
        integration_client, create_body(amount="9" * 20 + "." + "9" * 17 + "8"), key="k"
    )

    assert_error(again, 422, "idempotency_key_reused")


@pytest.mark.skipif(settings.DB_IS_POSTGRES, reason="SQLite only")
@pytest.mark.parametrize("amount", ["1234567890123456", "1234567890.1234567", "0.1234567890123456"])
def test_on_sqlite_an_amount_it_would_round_is_a_400(integration_client, amount):
    response = post_create(integration_client, create_body(amount=amount))

    assert_error(response, 400, "invalid")
    assert not MovementRequest.objects.exists()


@pytest.mark.parametrize("amount", ["123456789012345", "12345678901234.5", "0.123456789012345"])
def test_an_amount_of_15_significant_digits_is_kept_exactly(integration_client, amount):
    response = post_create(integration_client, create_body(amount=amount))

    assert response.status_code == 201
    assert response.json()["amount"] == amount


def test_an_unknown_template_is_a_400_with_field_details_and_writes_nothing(integration_client):
    response = post_create(integration_client, create_body(template="teleport"))

    body = assert_error(response, 400, "invalid")
    assert "template" in body["details"]
    assert not MovementRequest.objects.exists()
    assert not MovementEvent.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("asset", 5),
        ("asset", ""),
        ("asset", "U SDC"),
        ("asset", "A" * 33),
        ("source", None),
        ("source", "x" * 201),
        ("destination", "nul\x00byte"),
        ("destination", "\ud800"),
        ("params", []),
        ("params", "network=tron"),
        ("params", {"network": "a\x00b"}),
        ("params", {"\ud800": 1}),
        ("expires_in_seconds", "60"),
        ("expires_in_seconds", 60.0),
        ("expires_in_seconds", 0),
        ("expires_in_seconds", 10**30),
        ("expires_in_seconds", True),
        ("template", 7),
    ],
)
def test_a_field_of_the_wrong_type_or_shape_is_a_400_naming_it(integration_client, field, value):
    response = post_create(integration_client, create_body(**{field: value}))

    body = assert_error(response, 400, "invalid")
    assert field in body["details"]
    assert not MovementRequest.objects.exists()


def test_missing_fields_are_each_named(integration_client):
    response = post_create(integration_client, {})

    body = assert_error(response, 400, "invalid")
    assert set(body["details"]) == {"template", "asset", "amount", "source", "destination"}


@pytest.mark.parametrize("body", [[], "text", 42, None])
def test_a_body_that_is_not_an_object_is_a_400(integration_client, body):
    response = post_create(integration_client, body)

    assert_error(response, 400, "invalid")


def test_params_the_template_refuses_give_a_failed_movement_with_its_reason(integration_client):
    response = post_create(integration_client, create_body(params={"colour": "blue"}))

    assert response.status_code == 201
    body = response.json()
    assert body["request_state"] == "FAILED"
    assert "colour" in body["failure_reason"]
    assert body["nodes"] == []


def test_a_template_param_is_bound_on_the_movement(integration_client):
    response = post_create(integration_client, create_body(params={"network": "tron"}))

    assert response.status_code == 201
    assert response.json()["params"]["network"] == "tron"


# --- Idempotency -----------------------------------------------------------------------------


def test_a_create_without_an_idempotency_key_is_a_400(integration_client):
    response = integration_client.post(MOVEMENTS, create_body(), format="json")

    body = assert_error(response, 400, "invalid")
    assert "Idempotency-Key" in body["details"]
    assert not MovementRequest.objects.exists()


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, "caf\u00e9"])
def test_a_malformed_idempotency_key_is_a_400(integration_client, key):
    response = integration_client.post(
        MOVEMENTS, create_body(), format="json", HTTP_IDEMPOTENCY_KEY=key
    )

    assert_error(response, 400, "invalid")
    assert not MovementRequest.objects.exists()


def test_the_same_key_and_body_again_returns_the_same_movement_and_creates_nothing(
    integration_client,
):
    first = post_create(integration_client, key="order-42")

    again = post_create(integration_client, key="order-42")

    assert first.status_code == 201
    assert again.status_code == 200
    assert again["Idempotency-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert MovementRequest.objects.count() == 1


def test_the_same_key_with_a_different_body_is_a_422(integration_client):
    post_create(integration_client, key="order-42")

    response = post_create(integration_client, create_body(amount="7"), key="order-42")

    body = assert_error(response, 422, "idempotency_key_reused")
    assert body["details"]["idempotency_key"] == "order-42"
    assert MovementRequest.objects.count() == 1


def test_idempotency_keys_are_scoped_to_the_client(integration_client):
    other = client_for(make_user("other-bot"))
    first = post_create(integration_client, key="order-42")

    second = post_create(other, key="order-42")

    assert second.status_code == 201
    assert second.json()["id"] != first.json()["id"]
    assert MovementRequest.objects.count() == 2


def test_a_replay_of_a_failed_movement_returns_it_unchanged(integration_client):
    body = create_body(params={"colour": "blue"})
    first = post_create(integration_client, body, key="k")

    again = post_create(integration_client, body, key="k")

    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["request_state"] == "FAILED"


def test_a_create_the_hardcap_refuses_is_one_failed_movement_with_nothing_of_the_attempt(
    integration_client,
):
    # No hardcap covers EURC: the hold, which comes last, refuses. The attempt (its plan, its
    # transitions, its callback events) rolls back whole, and the refusal is recorded.
    created = post_create(integration_client, create_body(asset="EURC"), key="refused")

    assert created.status_code == 201, created.content
    movement = MovementRequest.objects.get()
    assert movement.request_state == "FAILED"
    assert movement.failure_reason.startswith("no hardcap is configured for EURC")
    assert created.json()["reservation"] is None
    assert not movement.nodes.exists()
    assert [(e.kind, e.old_state, e.new_state) for e in movement.events.order_by("pk")] == [
        (MovementEvent.Kind.CREATED, "", "RECEIVED"),
        (MovementEvent.Kind.TRANSITION, "RECEIVED", "FAILED"),
    ]
    events = Event.objects.filter(request=movement).order_by("sequence")
    assert [
        (e.event_type, e.sequence, json.loads(e.body)["data"]["request_state"]) for e in events
    ] == [
        ("request_created", 1, "RECEIVED"),
        ("request_failed", 2, "FAILED"),
    ]
    again = post_create(integration_client, create_body(asset="EURC"), key="refused")
    assert again.status_code == 200
    assert again.json()["id"] == str(movement.pk)

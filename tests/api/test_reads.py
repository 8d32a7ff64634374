"""GET endpoints: route templates, the movement list (pagination, filters, visibility), one
movement, and its events."""

from datetime import timedelta

import pytest
from django.utils import timezone

from movements.models import MovementRequest
from tests.api.conftest import (
    MOVEMENTS,
    assert_error,
    client_for,
    create_body,
    movement_url,
    post_create,
)
from tests.conftest import make_user

# A movement id nothing has; fixed, so every pytest-xdist worker collects the same tests.
NO_SUCH_MOVEMENT = "5d4c3b2a-1f0e-4d9c-8b7a-000000000404"


def test_route_templates_list_their_nodes_and_edges(integration_client):
    response = integration_client.get("/api/v1/route-templates/")

    assert response.status_code == 200
    templates = {t["key"]: t for t in response.json()}
    assert {"cex_to_cex", "cex_to_cex_gated", "split_join", "cctp"} <= set(templates)
    split = templates["split_join"]
    assert split["version"] == 1
    assert split["nodes"][0] == {"key": "withdraw", "kind": "ACTION", "has_side_effect": True}
    assert {"source": "withdraw", "target": "chain_observe"} in split["edges"]
    assert {"source": "chain_observe", "target": "deposit_observe"} in split["edges"]
    gated = {n["key"]: n["kind"] for n in templates["cex_to_cex_gated"]["nodes"]}
    assert gated["manual_release"] == "MANUAL_GATE"


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/route-templates/",
        MOVEMENTS,
        f"{MOVEMENTS}{NO_SUCH_MOVEMENT}/",
        f"{MOVEMENTS}{NO_SUCH_MOVEMENT}/events/",
    ],
)
def test_every_read_needs_a_token(client, url):
    response = client.get(url)

    assert_error(response, 401, "not_authenticated")


@pytest.mark.parametrize("header", ["Token nope", "Token", "Token a b", "Bearer x", "Token \x00"])
def test_a_bad_token_is_a_401(db, client, header):
    response = client.get(MOVEMENTS, HTTP_AUTHORIZATION=header)

    assert_error(response, 401)


def test_an_inactive_users_token_is_refused(integration):
    client = client_for(integration)
    integration.is_active = False
    integration.save()

    assert client.get(MOVEMENTS).status_code == 401


# --- one movement ----------------------------------------------------------------------------


def test_reading_a_movement_returns_its_nodes_in_plan_order(created, integration_client):
    response = integration_client.get(movement_url(created["id"]))

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == created["id"]
    assert [n["node_key"] for n in body["nodes"]] == [
        "withdraw",
        "withdraw_observe",
        "deposit_observe",
    ]
    withdraw = body["nodes"][0]
    assert withdraw == {
        "node_key": "withdraw",
        "kind": "ACTION",
        "node_state": "BLOCKED",
        "has_side_effect": True,
        "attempt": 1,
        "external_ref": None,
        "state_changed_at": withdraw["state_changed_at"],
    }
    assert body["reservation"] is None or set(body["reservation"]) == {"state", "amount"}


@pytest.mark.parametrize("movement_id", ["not-a-uuid", NO_SUCH_MOVEMENT, "1", "%00"])
def test_an_unknown_movement_is_a_404(integration_client, movement_id):
    response = integration_client.get(f"{MOVEMENTS}{movement_id}/")

    assert_error(response, 404, "not_found")


def test_a_client_without_the_view_permission_sees_only_its_own_movements(created):
    stranger = client_for(make_user("stranger"))

    assert_error(stranger.get(movement_url(created["id"])), 404)
    assert_error(stranger.get(movement_url(created["id"], "events")), 404)
    assert stranger.get(MOVEMENTS).json()["count"] == 0


def test_the_view_permission_shows_every_movement(created):
    auditor = client_for(make_user("auditor", "view_movementrequest"))

    assert auditor.get(movement_url(created["id"])).status_code == 200
    assert auditor.get(MOVEMENTS).json()["count"] == 1


# --- events ----------------------------------------------------------------------------------


def test_events_are_listed_oldest_first(created, approver_client):
    approver_client.post(movement_url(created["id"], "approve"))

    response = approver_client.get(movement_url(created["id"], "events"))

    assert response.status_code == 200
    events = response.json()
    request_events = [(e["old_state"], e["new_state"]) for e in events if e["node_key"] is None]
    assert request_events == [
        (None, "RECEIVED"),
        ("RECEIVED", "VALIDATED"),
        ("VALIDATED", "PENDING_APPROVAL"),
        ("PENDING_APPROVAL", "APPROVED"),
    ]
    stamps = [e["created_at"] for e in events]
    assert stamps == sorted(stamps)
    approval = next(e for e in events if e["new_state"] == "APPROVED")
    assert approval["actor_type"] == "user"
    assert approval["actor_id"] == str(MovementRequest.objects.get().approved_by_id)
    woken = next(e for e in events if e["node_key"] == "withdraw")
    assert (woken["old_state"], woken["new_state"]) == ("BLOCKED", "READY")
    assert set(events[0]) == {
        "node_key",
        "kind",
        "old_state",
        "new_state",
        "actor_type",
        "actor_id",
        "detail",
        "created_at",
    }


# --- the list: pagination and filters ---------------------------------------------------------


@pytest.fixture
def three_movements(integration_client):
    """USDC cex_to_cex (PENDING_APPROVAL), ETH split_join, and a FAILED one."""
    ids = {}
    for name, body in {
        "usdc": create_body(),
        "eth": create_body(template="split_join", asset="ETH"),
        "failed": create_body(params={"colour": "blue"}),
    }.items():
        ids[name] = post_create(integration_client, body).json()["id"]
    return ids


def ids_of(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {m["id"] for m in response.json()["results"]}


def test_the_list_is_paginated_newest_first(integration_client, three_movements):
    first = integration_client.get(MOVEMENTS, {"page_size": 2})
    second = integration_client.get(first.json()["next"])

    assert first.json()["count"] == 3
    assert len(first.json()["results"]) == 2
    assert len(second.json()["results"]) == 1
    assert second.json()["next"] is None
    created = [m["created_at"] for m in first.json()["results"] + second.json()["results"]]
    assert created == sorted(created, reverse=True)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"request_state": "FAILED"}, {"failed"}),
        ({"request_state": "PENDING_APPROVAL"}, {"usdc", "eth"}),
        ({"template": "split_join"}, {"eth"}),
        ({"asset": "eth"}, {"eth"}),
        ({"asset": "USDC", "request_state": "PENDING_APPROVAL"}, {"usdc"}),
        ({"template": "nope"}, set()),
    ],
)
def test_the_list_filters(integration_client, three_movements, params, expected):
    response = integration_client.get(MOVEMENTS, params)

    assert ids_of(response) == {three_movements[name] for name in expected}


def test_an_empty_template_or_asset_filter_is_ignored(integration_client, three_movements):
    response = integration_client.get(MOVEMENTS, {"template": "", "asset": ""})

    assert ids_of(response) == set(three_movements.values())


def test_the_list_filters_by_creation_time(integration_client, three_movements):
    old = MovementRequest.objects.get(pk=three_movements["usdc"])
    old.created_at = timezone.now() - timedelta(days=10)
    old.save(update_fields=["created_at"])
    cutoff = (timezone.now() - timedelta(days=1)).isoformat()

    before = integration_client.get(MOVEMENTS, {"created_before": cutoff})
    after = integration_client.get(MOVEMENTS, {"created_after": cutoff})

    assert ids_of(before) == {three_movements["usdc"]}
    assert ids_of(after) == {three_movements["eth"], three_movements["failed"]}


@pytest.mark.parametrize(
    "value",
    [
        "2026-01-01T00:00:00Z",
        "2026-01-01t00:00:00z",
        "2026-01-01",
        "9999-12-31T23:59:59-14:00",
        "0001-01-01T00:00:00+14:00",
    ],
)
def test_any_iso_timestamp_is_a_valid_filter(integration_client, value):
    response = integration_client.get(MOVEMENTS, {"created_after": value, "created_before": value})

    assert response.status_code == 200


@pytest.mark.parametrize(
    "params",
    [
        {"request_state": "SLEEPING"},
        {"created_after": "yesterday"},
        {"created_before": "2026-13-45T99:00:00"},
        {"created_after": "9" * 500},
        {"template": "a\x00b"},
        {"created_after": ""},
        {"request_state": ""},
        {"page_size": "0"},
        {"page_size": "201"},
        {"page_size": "ten"},
    ],
)
def test_a_bad_filter_value_is_a_400_naming_the_filter(integration_client, params):
    response = integration_client.get(MOVEMENTS, params)

    body = assert_error(response, 400, "invalid")
    assert set(params) <= set(body["details"])


@pytest.mark.parametrize("page", ["0", "-1", "abc", "99999999999999999999999", "2"])
def test_a_page_that_does_not_exist_is_a_404(integration_client, three_movements, page):
    response = integration_client.get(MOVEMENTS, {"page": page})

    assert_error(response, 404, "not_found")


@pytest.mark.parametrize(
    ("url", "params"),
    [
        (MOVEMENTS, {"state": "FAILED"}),
        (MOVEMENTS, {"request_state": "FAILED", "colour": "red"}),
        ("/api/v1/route-templates/", {"key": "cex_to_cex"}),
    ],
)
def test_an_unknown_query_parameter_is_a_400_naming_it(integration_client, url, params):
    response = integration_client.get(url, params)

    body = assert_error(response, 400, "invalid")
    assert set(body["details"]) == set(params) - {"request_state"}


def test_an_unknown_query_parameter_on_an_action_is_a_400(created, approver_client):
    response = approver_client.post(movement_url(created["id"], "approve") + "?force=1")

    assert "force" in assert_error(response, 400, "invalid")["details"]

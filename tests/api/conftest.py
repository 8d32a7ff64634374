"""API fixtures: clients that authenticate with a DRF token, and a valid create body."""

import json
import uuid

import pytest
from rest_framework.test import APIClient

from access.services import api_token_mint
from tests.conftest import ALL_MOVEMENT_PERMS, make_user

MOVEMENTS = "/api/v1/movements/"


def movement_url(movement_id, action: str = "") -> str:
    return f"{MOVEMENTS}{movement_id}/" + (f"{action}/" if action else "")


def token_for(user) -> str:
    """A fresh API token's key for ``user``."""
    return api_token_mint(user=user, actor_label="tests").key


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


def create_body(**overrides) -> dict:
    body = {
        "template": "cex_to_cex",
        "asset": "USDC",
        "amount": "100.50",
        "source": "sandbox-exchange-a",
        "destination": "sandbox-exchange-b",
    }
    body.update(overrides)
    return body


def post_json(client: APIClient, url: str, body, **headers):
    """POST ``body`` as JSON text. json.dumps escapes what UTF-8 cannot carry (a lone
    surrogate), so even such bodies reach the server as a client would send them."""
    return client.post(url, json.dumps(body), content_type="application/json", **headers)


def post_create(client: APIClient, body=..., *, key: str | None = None):
    return post_json(
        client,
        MOVEMENTS,
        create_body() if body is ... else body,
        HTTP_IDEMPOTENCY_KEY=key or uuid.uuid4().hex,
    )


def assert_error(response, status: int, code: str | None = None) -> dict:
    """Every 4xx and 5xx is an RFC 9457 problem: type, title, status, detail (once: no
    ``message`` copy since contract 1.2), plus code and details."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail", "code", "details"}
    assert body["status"] == status
    assert body["type"] == f"urn:qtg:problem:{body['code']}"
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert isinstance(body["details"], dict)
    if code is not None:
        assert body["code"] == code
    return body


@pytest.fixture
def integration(db):
    """A treasury bot: may create movements and read its own, nothing more."""
    return make_user("integration")


@pytest.fixture
def approver(db):
    """An operator holding every movement permission (view, approve, reject, ...)."""
    return make_user("approver", *ALL_MOVEMENT_PERMS)


@pytest.fixture
def integration_client(integration) -> APIClient:
    return client_for(integration)


@pytest.fixture
def approver_client(approver) -> APIClient:
    return client_for(approver)


@pytest.fixture
def created(integration_client) -> dict:
    """A movement created through the API by the integration, waiting for approval."""
    response = post_create(integration_client)
    assert response.status_code == 201, response.content
    return response.json()

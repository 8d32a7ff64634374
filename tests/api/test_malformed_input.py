"""Whatever bytes arrive, the answer is a 4xx in the one error shape, never a 500."""

import json
import uuid

import pytest

from movements.models import MovementRequest
from tests.api.conftest import MOVEMENTS, assert_error, create_body, movement_url


def post_raw(client, url, data: bytes, content_type="application/json"):
    return client.generic(
        "POST", url, data, content_type=content_type, HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex
    )


@pytest.mark.parametrize(
    "data",
    [
        b"{",
        b"{'template': 'cex_to_cex'}",
        b'{"amount": NaN}',
        b'{"amount": Infinity}',
        b"\xff\xfe\x00",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"params": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}",
        b'{"expires_in_seconds": ' + b"9" * 5000 + b"}",
    ],
    ids=[
        "truncated",
        "single-quotes",
        "nan",
        "infinity",
        "not-utf8",
        "deep-list",
        "deep-object",
        "5000-digit-int",
    ],
)
def test_a_body_no_json_parser_accepts_is_a_400(integration_client, data, settings):
    # Some of these are larger than the body limit (a 413, tests/security): the parser's own
    # refusals are what is tested here.
    settings.QTG_API_MAX_BODY_BYTES = 1_000_000
    response = post_raw(integration_client, MOVEMENTS, data)

    assert_error(response, 400, "parse_error")
    assert not MovementRequest.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        b'{"params": ' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"}",
        b'{"params": {"x": 1e400}}',
        b'{"expires_in_seconds": 1e400}',
        b'{"amount": 1e400}',
        b'{"amount": 100000000000000000000000000000000000000000000000000}',
    ],
    ids=["params-40-deep", "params-inf", "expires-inf", "amount-inf", "amount-huge-int"],
)
def test_a_body_that_parses_but_cannot_be_stored_is_a_400(integration_client, body):
    prefix = (
        b'{"template": "cex_to_cex", "asset": "USDC", "source": "a", "destination": "b", '
        b'"amount": "1", '
    )
    response = post_raw(integration_client, MOVEMENTS, prefix + body[1:])

    assert_error(response, 400, "invalid")
    assert not MovementRequest.objects.exists()


def test_an_empty_body_names_every_required_field(integration_client):
    response = post_raw(integration_client, MOVEMENTS, b"")

    assert "amount" in assert_error(response, 400, "invalid")["details"]


@pytest.mark.parametrize(
    "content_type",
    [
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/plain",
        "application/xml",
    ],
)
def test_a_body_that_is_not_json_is_a_415(integration_client, content_type):
    response = post_raw(integration_client, MOVEMENTS, b"template=cex_to_cex", content_type)

    assert_error(response, 415, "unsupported_media_type")


def test_a_json_body_in_an_unknown_charset_is_read_as_utf8(integration_client):
    response = post_raw(
        integration_client,
        MOVEMENTS,
        json.dumps(create_body()).encode(),
        "application/json; charset=no-such-charset",
    )

    assert response.status_code == 201


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_a_method_the_endpoint_does_not_have_is_a_405(integration_client, created, method):
    response = getattr(integration_client, method)(movement_url(created["id"]))

    assert_error(response, 405, "method_not_allowed")


def test_a_get_on_an_action_is_a_405(integration_client, created):
    response = integration_client.get(movement_url(created["id"], "approve"))

    assert_error(response, 405, "method_not_allowed")


READ_URLS = ["/api/v1/route-templates/", MOVEMENTS, "{movement}", "{movement}events/"]


@pytest.mark.parametrize("url", READ_URLS)
@pytest.mark.parametrize("accept", ["text/html", "*/*", "application/json"])
@pytest.mark.parametrize("method", ["get", "head", "options"])
def test_reads_answer_json_whatever_the_accept_header_says(
    approver_client, created, url, accept, method
):
    url = url.format(movement=movement_url(created["id"]))

    response = getattr(approver_client, method)(url, HTTP_ACCEPT=accept)

    assert response.status_code == (406 if accept == "text/html" else 200)
    if method != "head":
        expected = "application/problem+json" if response.status_code == 406 else "application/json"
        assert response["Content-Type"] == expected
    if response.status_code == 406 and method != "head":
        assert_error(response, 406, "not_acceptable")


def test_deep_nesting_is_refused_before_parsing_even_with_a_raised_recursion_limit(
    integration_client, settings
):
    """A library may raise the interpreter's recursion limit (py_ecc does, under web3): the
    API must still answer a deeply nested body with a 400 instead of overflowing the C stack."""
    import sys

    settings.QTG_API_MAX_BODY_BYTES = 1_000_000

    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        response = integration_client.post(
            "/api/v1/movements/",
            data="[" * 200_000 + "]" * 200_000,
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="deep",
        )
    finally:
        sys.setrecursionlimit(previous)
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["detail"]


@pytest.mark.parametrize("host", ["}h", "evil.example", "a b"])
def test_a_host_header_the_service_does_not_answer_to_is_a_400_problem(
    integration_client, created, host
):
    """Django refuses an unknown or malformed Host before any view runs (DisallowedHost); under
    /api/ that refusal is a problem document like every other, not Django's HTML page, and
    nothing changes."""
    response = integration_client.post(
        movement_url(created["id"], "cancel"), {"reason": "x"}, format="json", HTTP_HOST=host
    )

    body = assert_error(response, 400, "invalid")
    assert "Host" in body["detail"]
    assert MovementRequest.objects.get(pk=created["id"]).request_state == created["request_state"]


def test_outside_the_api_a_refused_host_keeps_django_s_page(client):
    response = client.get("/admin/login/", HTTP_HOST="evil.example")

    assert response.status_code == 400
    assert not response["Content-Type"].startswith("application/problem+json")

"""The OpenAPI schema validates, is served, and its docs page needs no internet."""

import re
from io import StringIO

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command

from tests.api.conftest import MOVEMENTS
from tests.conftest import make_user

OPERATIONS = {
    ("/api/v1/route-templates/", "get"),
    ("/api/v1/movements/", "get"),
    ("/api/v1/movements/", "post"),
    ("/api/v1/movements/{id}/", "get"),
    ("/api/v1/movements/{id}/approve/", "post"),
    ("/api/v1/movements/{id}/reject/", "post"),
    ("/api/v1/movements/{id}/cancel/", "post"),
    ("/api/v1/movements/{id}/resume/", "post"),
    ("/api/v1/movements/{id}/events/", "get"),
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
    operations = {(path, method) for path, item in schema["paths"].items() for method in item}
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

"""A minted API key and a webhook signing secret are shown once, on a page rendered from the
server-side session: never in a cookie (Django's message cookie is signed, not encrypted)."""

import pytest
from django.contrib.messages.storage.cookie import CookieStorage
from django.test import RequestFactory
from django.urls import reverse

from access.models import ApiToken
from access.services import token_digest
from callbacks.models import Subscription
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def cookie_texts(client) -> list[str]:
    """Every cookie the browser holds, the message cookie decoded."""
    texts = []
    for name, morsel in client.cookies.items():
        texts.append(morsel.value)
        if name == "messages":
            decoded = CookieStorage(RequestFactory().get("/"))._decode(morsel.value) or []
            texts.extend(str(message) for message in decoded)
    return texts


def test_a_minted_key_is_shown_once_from_the_session_and_never_in_a_cookie(admin_client):
    bot = make_user("bot")

    response = admin_client.post(
        reverse("admin:access_apitoken_add"),
        {"user": bot.pk, "name": "payouts", "days": 30, "scopes": ["read"]},
    )

    # then the browser is sent to the one-time page, holding no cookie with the key
    assert response.status_code == 302
    assert "/admin/one-time-secret/" in response["Location"]
    page = admin_client.get(response["Location"])
    assert page.status_code == 200
    assert "no-store" in page["Cache-Control"]
    [token] = ApiToken.objects.all()
    key = page.context["shown"]["secret"]
    assert token.digest == token_digest(key) and key in page.content.decode()
    assert not any(key in text for text in cookie_texts(admin_client))
    # and a second look shows nothing
    again = admin_client.get(response["Location"])
    assert again.status_code == 410
    assert key not in again.content.decode()


def test_a_generated_webhook_secret_is_shown_once_and_never_in_a_cookie(admin_client):
    response = admin_client.post(
        reverse("admin:callbacks_subscription_add"),
        {
            "name": "treasury",
            "url": "http://127.0.0.1:8080/hook",
            "event_types": ["request_completed"],
            "is_active": "on",
        },
    )

    subscription = Subscription.objects.get(name="treasury")
    assert not any(subscription.secret in text for text in cookie_texts(admin_client))
    page = admin_client.get(response["Location"])
    assert subscription.secret in page.content.decode()
    assert admin_client.get(response["Location"]).status_code == 410


def test_someone_else_cannot_open_the_page(admin_client, client, admin_user):
    bot = make_user("bot")
    response = admin_client.post(
        reverse("admin:access_apitoken_add"),
        {"user": bot.pk, "name": "x", "days": 30, "scopes": ["read"]},
    )
    other = make_user("other-admin", is_staff=True, is_superuser=True)
    client.force_login(other)

    page = client.get(response["Location"])

    assert page.status_code == 410

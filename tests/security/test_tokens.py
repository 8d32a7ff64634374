"""API tokens are stored as digests and expire; a superuser minting one for someone else is
recorded as such; every client is throttled."""

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from access.models import ApiToken, ApiTokenEvent
from access.services import api_token_mint, api_token_revoke, token_digest
from tests.api.conftest import MOVEMENTS
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def get(key: str):
    return APIClient().get(MOVEMENTS, HTTP_AUTHORIZATION=f"Token {key}")


def test_a_token_is_stored_as_a_digest_never_as_its_key():
    minted = api_token_mint(user=make_user("bot"))

    row = ApiToken.objects.values().get(pk=minted.token.pk)
    assert minted.key not in {str(value) for value in row.values()}
    assert row["digest"] == token_digest(minted.key)
    assert get(minted.key).status_code == 200


def test_an_expired_token_is_refused():
    minted = api_token_mint(user=make_user("bot"), lifetime=timedelta(days=1))
    ApiToken.objects.filter(pk=minted.token.pk).update(expires_at=timezone.now())

    assert get(minted.key).status_code == 401


def test_a_revoked_token_is_refused():
    minted = api_token_mint(user=make_user("bot"))
    api_token_revoke(token=minted.token)

    assert get(minted.key).status_code == 401


def test_a_token_cannot_outlive_the_maximum_lifetime(settings):
    settings.QTG_API_TOKEN_MAX_LIFETIME = timedelta(days=30)

    with pytest.raises(ValueError, match="at most 30 days"):
        api_token_mint(user=make_user("bot"), lifetime=timedelta(days=31))


def test_a_superuser_minting_a_token_for_someone_else_is_recorded(client, admin_user):
    bot = make_user("bot")
    client.force_login(admin_user)

    response = client.post(
        reverse("admin:access_apitoken_add"),
        {"user": bot.pk, "name": "payouts", "days": 30, "scopes": ["read"]},
    )

    assert response.status_code == 302
    key = client.get(response["Location"]).context["shown"]["secret"]
    assert get(key).status_code == 200
    event = ApiTokenEvent.objects.get()
    assert (event.action, event.subject, event.actor) == ("minted", bot, admin_user)
    assert event.for_someone_else is True


def test_a_staff_user_who_is_not_a_superuser_mints_only_their_own_tokens(client):
    staff = make_user("staff", is_staff=True)
    bot = make_user("bot")
    client.force_login(staff)
    add = reverse("admin:access_apitoken_add")

    for_bot = client.post(add, {"user": bot.pk, "name": "x", "days": 30, "scopes": ["read"]})
    own = client.post(add, {"user": staff.pk, "name": "x", "days": 30, "scopes": ["read"]})

    assert for_bot.status_code == 200  # the form again: bot is not a choice
    assert not ApiToken.objects.filter(user=bot).exists()
    assert own.status_code == 302
    assert ApiToken.objects.get(user=staff).minted_for_other is False


def test_each_client_is_throttled(settings):
    settings.QTG_API_THROTTLE_USER = "2/min"
    cache.clear()
    key = api_token_mint(user=make_user("bot")).key
    other = api_token_mint(user=make_user("other")).key

    statuses = [get(key).status_code for _ in range(3)]

    assert statuses == [200, 200, 429]
    assert get(other).status_code == 200


@pytest.mark.django_db
def test_a_drf_token_is_accepted_only_where_legacy_tokens_are_on(settings, client):
    """The embedded profile keeps v1.0 clients (``manage.py drf_create_token``) working;
    production accepts only hashed, expiring tokens."""
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user("legacy-bot")
    key = Token.objects.create(user=user).key
    headers = {"HTTP_AUTHORIZATION": f"Token {key}"}

    settings.QTG_API_LEGACY_TOKENS = True
    assert client.get("/api/v1/movements/", **headers).status_code == 200
    settings.QTG_API_LEGACY_TOKENS = False
    assert client.get("/api/v1/movements/", **headers).status_code == 401


def test_a_token_minted_on_the_command_line_names_who_ran_it_and_where(capsys):
    import getpass
    import os
    import socket

    from django.core.management import call_command

    make_user("bot")
    call_command("api_token_create", "bot")

    event = ApiTokenEvent.objects.get()
    assert event.actor is None
    assert event.actor_label == (
        f"manage.py api_token_create by {getpass.getuser()}@{socket.gethostname()}:{os.getpid()}"
    )

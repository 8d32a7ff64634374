"""Integrator contract v1.1 on the movements API: the IETF Idempotency-Key (quoted form,
retention), and cursor paging over changes with updated_after."""

from datetime import timedelta

import pytest
from django.utils import timezone

from movements.models import MovementRequest
from movements.services.intake import idempotency_keys_purge
from movements.tasks import purge_idempotency_keys
from tests.api.conftest import MOVEMENTS, assert_error, create_body, post_create

pytestmark = pytest.mark.django_db


def test_the_quoted_form_of_a_key_is_the_same_key(integration_client):
    first = post_create(integration_client, key="order-7")

    again = post_create(integration_client, key='"order-7"')

    assert (first.status_code, again.status_code) == (201, 200)
    assert again["Idempotency-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]


def test_a_key_past_its_retention_is_purged_and_may_be_used_again(integration_client, settings):
    settings.QTG_IDEMPOTENCY_KEY_RETENTION = timedelta(days=7)
    first = post_create(integration_client, key="order-8")
    MovementRequest.objects.filter(pk=first.json()["id"]).update(
        created_at=timezone.now() - timedelta(days=8)
    )
    recent = post_create(integration_client, key="order-9")

    purged = purge_idempotency_keys()
    again = post_create(integration_client, create_body(amount="3"), key="order-8")

    assert purged == 1
    assert again.status_code == 201
    assert again.json()["id"] != first.json()["id"]
    kept = MovementRequest.objects.get(pk=recent.json()["id"])
    assert kept.idempotency_key == "order-9"


def test_an_expired_key_is_forgotten_even_before_the_purge_runs(integration_client, settings):
    settings.QTG_IDEMPOTENCY_KEY_RETENTION = timedelta(days=7)
    first = post_create(integration_client, key="order-10")
    MovementRequest.objects.filter(pk=first.json()["id"]).update(
        created_at=timezone.now() - timedelta(days=8)
    )

    again = post_create(integration_client, create_body(amount="3"), key="order-10")

    assert again.status_code == 201
    assert idempotency_keys_purge() == 0


def test_updated_after_pages_by_cursor_oldest_change_first(integration_client):
    ids = [post_create(integration_client).json()["id"] for _ in range(3)]
    since = "2000-01-01T00:00:00Z"

    first = integration_client.get(MOVEMENTS, {"updated_after": since, "page_size": 2}).json()
    second = integration_client.get(
        MOVEMENTS, {"cursor": first["next_cursor"], "page_size": 2}
    ).json()

    assert set(first) == {"next", "next_cursor", "results"}
    assert [m["id"] for m in first["results"] + second["results"]] == ids
    assert first["next"] is not None
    assert second["next"] is None
    # The last page's cursor is where a poller continues from.
    later = integration_client.get(MOVEMENTS, {"cursor": second["next_cursor"]}).json()
    assert later["results"] == []


def test_page_number_paging_still_works_and_a_bad_cursor_is_a_problem(integration_client):
    post_create(integration_client)

    paged = integration_client.get(MOVEMENTS, {"page": 1}).json()
    bad = integration_client.get(MOVEMENTS, {"cursor": "not-a-cursor"})

    assert set(paged) == {"count", "next", "previous", "results"}
    assert_error(bad, 400, "invalid")

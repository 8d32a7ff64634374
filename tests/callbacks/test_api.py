"""The integrator's webhook API (/api/v1/webhooks/) and event feed (/api/v1/events/), with a
real receiver on 127.0.0.1 verifying with the stock standardwebhooks library."""

import importlib.util
from pathlib import Path

import pytest
from django.core.cache import cache
from django.db import transaction
from standardwebhooks import Webhook

from callbacks.models import Delivery, DeliveryStatus, Subscription
from movements.services import movement_approve
from qtg.core.actors import Actor
from tests.api.conftest import client_for, post_create, post_json, token_for
from tests.conftest import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager_tasks")]

DOCS_EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "integrator_example.py"
WEBHOOKS = "/api/v1/webhooks/"
EVENTS = "/api/v1/events/"


@pytest.fixture
def bot():
    return make_user("bot")


@pytest.fixture
def bot_client(bot):
    return client_for(bot)


def _subscribe(client, url, *events, captured=None):
    response = post_json(client, WEBHOOKS, {"url": url, "event_types": list(events)})
    assert response.status_code == 201, response.content
    return response.json()


def test_the_secret_is_returned_once_and_only_its_fingerprint_after(bot_client, receiver):
    created = _subscribe(bot_client, receiver.url, "request_approved")

    assert created["secret"].startswith("whsec_")
    listed = bot_client.get(WEBHOOKS).json()
    read = bot_client.get(f"{WEBHOOKS}{created['id']}/").json()
    assert [w["id"] for w in listed] == [created["id"]]
    for shown in (listed[0], read):
        assert "secret" not in shown
        assert shown["secret_fingerprint"] == created["secret_fingerprint"]
    assert created["secret"] not in bot_client.get(WEBHOOKS).content.decode()


def test_a_client_sees_and_changes_only_its_own_subscriptions(bot_client, receiver):
    created = _subscribe(bot_client, receiver.url, "request_approved")
    other = client_for(make_user("other-bot"))

    assert other.get(WEBHOOKS).json() == []
    assert other.get(f"{WEBHOOKS}{created['id']}/").status_code == 404
    assert other.delete(f"{WEBHOOKS}{created['id']}/").status_code == 404


def test_a_subscription_is_updated_and_deleted(bot_client, receiver):
    created = _subscribe(bot_client, receiver.url, "request_approved")
    url = f"{WEBHOOKS}{created['id']}/"

    changed = bot_client.patch(url, {"event_types": ["request_failed"]}, format="json")
    gone = bot_client.delete(url)

    assert changed.status_code == 200
    assert changed.json()["event_types"] == ["request_failed"]
    assert gone.status_code == 204
    assert bot_client.get(WEBHOOKS).json() == []
    assert not Subscription.objects.get(pk=created["id"]).is_active


def test_an_unknown_event_type_or_a_missing_url_is_a_problem(bot_client):
    response = post_json(bot_client, WEBHOOKS, {"event_types": ["request_exploded"]})

    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert set(response.json()["details"]) == {"url", "event_types"}


def test_the_test_event_is_signed_per_standard_webhooks(
    bot_client, receiver, django_capture_on_commit_callbacks
):
    created = _subscribe(bot_client, receiver.url, "request_approved")

    with django_capture_on_commit_callbacks(execute=True):
        response = bot_client.post(f"{WEBHOOKS}{created['id']}/test/")

    assert response.status_code == 202
    [got] = receiver.received
    payload = Webhook(created["secret"]).verify(got.body, got.headers)
    assert payload["type"] == "webhook_test"
    assert {"type", "timestamp", "data", "version"} <= set(payload)
    deliveries = bot_client.get(f"{WEBHOOKS}{created['id']}/deliveries/").json()["results"]
    assert deliveries[0]["status"] == "DELIVERED"
    assert deliveries[0]["attempt_log"][0]["status_code"] == 200


def test_a_client_redelivers_a_dead_delivery_of_its_own(
    bot_client, receiver, django_capture_on_commit_callbacks
):
    created = _subscribe(bot_client, receiver.url, "request_approved")
    receiver.answer(500)
    with django_capture_on_commit_callbacks(execute=True):
        bot_client.post(f"{WEBHOOKS}{created['id']}/test/")
    delivery = Delivery.objects.get()
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.DEAD)

    with django_capture_on_commit_callbacks(execute=True):
        response = bot_client.post(f"{WEBHOOKS}{created['id']}/deliveries/{delivery.pk}/redeliver/")

    assert response.status_code == 202, response.content
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED
    assert len({r.headers["webhook-id"] for r in receiver.received}) == 1


def test_during_a_rotation_both_secrets_verify_and_after_it_only_the_new(
    bot_client, receiver, django_capture_on_commit_callbacks
):
    created = _subscribe(bot_client, receiver.url, "request_approved")
    url = f"{WEBHOOKS}{created['id']}/"

    rotated = post_json(bot_client, f"{url}rotate-secret/", {"overlap_seconds": 3600}).json()
    with django_capture_on_commit_callbacks(execute=True):
        bot_client.post(f"{url}test/")
    post_json(bot_client, f"{url}rotate-secret/", {"overlap_seconds": 0})
    with django_capture_on_commit_callbacks(execute=True):
        bot_client.post(f"{url}test/")

    during, after = receiver.received
    assert rotated["secret"] != created["secret"]
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    Webhook(created["secret"]).verify(during.body, during.headers)
    Webhook(rotated["secret"]).verify(during.body, during.headers)
    assert len(after.headers["webhook-signature"].split(" ")) == 1


def test_a_clients_subscription_hears_only_its_own_movements(
    bot, bot_client, receiver, make_movement, django_capture_on_commit_callbacks
):
    _subscribe(bot_client, receiver.url, "request_approved")
    mine = make_movement(by=bot)
    theirs = make_movement()

    with django_capture_on_commit_callbacks(execute=True):
        for movement in (mine, theirs):
            movement_approve(request=movement, actor=Actor.system("tests-approver"))

    [got] = receiver.received
    assert got.json["data"]["id"] == str(mine.pk)


def test_the_feed_lists_the_clients_events_in_order_and_the_cursor_resumes(
    bot, bot_client, make_movement
):
    mine = make_movement(by=bot)
    make_movement()  # someone else's: never in this client's feed
    with transaction.atomic():
        movement_approve(request=mine, actor=Actor.system("tests-approver"))

    first = bot_client.get(EVENTS, {"page_size": 1}).json()
    rest = bot_client.get(EVENTS, {"after": first["next_cursor"]}).json()
    empty = bot_client.get(EVENTS, {"after": rest["next_cursor"]}).json()

    events = first["results"] + rest["results"]
    assert first["has_more"] is True
    assert [e["type"] for e in events] == [
        "request_created",
        "approval_pending",
        "request_approved",
        "frontier_advanced",
    ]
    assert [e["data"]["sequence"] for e in events] == [1, 2, 3, 4]
    assert {e["data"]["id"] for e in events} == {str(mine.pk)}
    assert (empty["results"], empty["has_more"]) == ([], False)


def test_a_malformed_cursor_is_a_problem_not_an_error(bot_client):
    response = bot_client.get(EVENTS, {"after": "yesterday"})

    assert response.status_code == 400
    assert response.json()["details"] == {"after": ["Invalid cursor."]}


def test_the_docs_example_verifies_a_real_webhook_and_refuses_a_tampered_one(
    bot, bot_client, receiver, make_movement, django_capture_on_commit_callbacks, monkeypatch
):
    spec = importlib.util.spec_from_file_location("integrator_example", DOCS_EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    created = _subscribe(bot_client, receiver.url, "request_approved")
    monkeypatch.setenv("QTG_WEBHOOK_SECRET", created["secret"])
    with django_capture_on_commit_callbacks(execute=True):
        movement_approve(request=make_movement(by=bot), actor=Actor.system("tests-approver"))
    [got] = receiver.received

    assert example.receive_webhook(got.body, got.headers) == 204
    # request_created and approval_pending came first (no subscription asked for them).
    assert example.seen == {got.json["data"]["id"]: 3}
    assert example.receive_webhook(got.body.replace(b"APPROVED", b"FAILED"), got.headers) == 400


def load_docs_example():
    spec = importlib.util.spec_from_file_location("integrator_example", DOCS_EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


@pytest.mark.django_db(transaction=True)
def test_the_docs_example_discovers_withdraws_and_waits_as_retry_after_says(
    live_server, bot, monkeypatch, settings
):
    monkeypatch.setenv("QTG_URL", live_server.url)
    monkeypatch.setenv("QTG_TOKEN", token_for(bot))
    example = load_docs_example()
    movement = post_create(client_for(bot)).json()

    discovered = example.discover()
    withdrawn = example.withdraw(movement["id"], "wrong amount")
    refused = example.withdraw(movement["id"], "wrong amount")

    assert "cex_to_cex" in discovered["templates"]
    assert "sandbox-exchange-b" in discovered["venues"]
    assert (withdrawn["request_state"], withdrawn["withdrawn_by"]) == ("REJECTED", "bot")
    assert (refused["status"], refused["details"]["current_state"]) == (409, "REJECTED")

    # Throttled, it waits as long as Retry-After says, then its retry goes through.
    settings.QTG_API_THROTTLE_USER = "1/minute"
    cache.clear()
    waited = []

    def sleep(seconds):
        waited.append(seconds)
        cache.clear()  # the throttle's window has passed

    monkeypatch.setattr(example.time, "sleep", sleep)
    example.call("GET", "/api/v1/templates/")

    assert example.call("GET", "/api/v1/venues/").status_code == 200
    assert len(waited) == 1 and waited[0] >= 1
    cache.clear()

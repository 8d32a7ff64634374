"""The callbacks admin: subscriptions are managed there, deliveries are read-only history with a
redeliver action behind a confirmation page."""

import pytest
from django.contrib.admin import helpers
from django.urls import reverse

from callbacks.models import Delivery, DeliveryStatus, Subscription
from callbacks.services import callback_enqueue, subscription_send_test

pytestmark = pytest.mark.django_db


@pytest.fixture
def dead(make_movement, subscribe):
    subscribe("http://127.0.0.1:9/hook", "request_approved")
    [delivery] = callback_enqueue(request=make_movement(), event_type="request_approved")
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.DEAD, attempts=3)
    return delivery


def test_an_operator_adds_a_subscription_choosing_its_events(admin_client):
    response = admin_client.post(
        reverse("admin:callbacks_subscription_add"),
        {
            "name": "treasury",
            "url": "http://127.0.0.1:8080/hook",
            "event_types": ["request_completed", "request_failed"],
            "is_active": "on",
        },
        follow=True,
    )

    assert response.status_code == 200
    subscription = Subscription.objects.get(name="treasury")
    assert subscription.event_types == ["request_completed", "request_failed"]
    # The generated secret is shown once, on the page after saving ...
    assert subscription.secret.startswith("whsec_")
    assert subscription.secret in response.content.decode()
    # ... and never again: its page shows a fingerprint.
    page = admin_client.get(
        reverse("admin:callbacks_subscription_change", args=[subscription.pk])
    ).content.decode()
    assert subscription.secret not in page
    assert subscription.secret_fingerprint in page


def test_an_operator_rotates_a_secret_and_the_old_one_signs_during_the_overlap(admin_client):
    subscription = Subscription.objects.create(
        name="t", url="http://127.0.0.1:8080/hook", event_types=["request_completed"]
    )
    old = subscription.secret

    response = admin_client.post(
        reverse("admin:callbacks_subscription_change", args=[subscription.pk]),
        {
            "name": "t",
            "url": "http://127.0.0.1:8080/hook",
            "event_types": ["request_completed"],
            "is_active": "on",
            "rotate_secret": "on",
        },
        follow=True,
    )

    subscription.refresh_from_db()
    assert subscription.secret != old
    assert subscription.secret in response.content.decode()
    assert subscription.signing_secrets() == [subscription.secret, old]


def test_a_short_or_malformed_secret_is_refused(admin_client):
    page = admin_client.post(
        reverse("admin:callbacks_subscription_add"),
        {
            "name": "weak",
            "url": "http://127.0.0.1:8080/hook",
            "new_secret": "whsec_" + "c2hvcnQ=",
            "event_types": ["request_completed"],
            "is_active": "on",
        },
    )

    assert page.status_code == 200
    assert b"at least 32 bytes" in page.content
    assert not Subscription.objects.exists()


def test_the_subscription_form_refuses_a_private_url_when_the_setting_is_off(
    admin_client, settings
):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = False

    page = admin_client.post(
        reverse("admin:callbacks_subscription_add"),
        {
            "name": "sneaky",
            "url": "http://169.254.169.254/latest",
            "event_types": ["request_completed"],
            "is_active": "on",
        },
    )

    assert page.status_code == 200
    assert b"private, loopback or link-local" in page.content
    assert not Subscription.objects.exists()


def test_a_delivery_page_is_read_only_and_shows_its_attempts(admin_client, dead):
    page = admin_client.get(reverse("admin:callbacks_delivery_change", args=[dead.pk]))

    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    assert b"request_approved" in page.content
    assert admin_client.get(reverse("admin:callbacks_delivery_add")).status_code == 403


def _redeliver(client, delivery, **extra):
    return client.post(
        reverse("admin:callbacks_delivery_changelist"),
        {
            "action": "redeliver_selected",
            helpers.ACTION_CHECKBOX_NAME: [str(delivery.pk)],
            **extra,
        },
    )


def test_redeliver_asks_for_confirmation_first(admin_client, dead):
    page = _redeliver(admin_client, dead)

    assert page.status_code == 200
    assert b"Yes, redeliver" in page.content
    dead.refresh_from_db()
    assert dead.status == DeliveryStatus.DEAD


def test_redeliver_once_confirmed_queues_the_delivery_again(
    admin_client, dead, admin_user, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:
        response = _redeliver(admin_client, dead, post="yes")

    assert response.status_code == 302
    dead.refresh_from_db()
    assert (dead.status, dead.attempts) == (DeliveryStatus.PENDING, 0)
    assert dead.redelivered_by == f"user:{admin_user.username}"
    assert len(queued) == 1


def test_a_test_event_delivery_is_listed_without_a_movement(admin_client, subscribe):
    delivery = subscription_send_test(subscription=subscribe("http://127.0.0.1:9/hook"))

    listing = admin_client.get(reverse("admin:callbacks_delivery_changelist"))
    page = admin_client.get(reverse("admin:callbacks_delivery_change", args=[delivery.pk]))

    assert listing.status_code == 200
    assert b"(test event)" in listing.content
    assert page.status_code == 200

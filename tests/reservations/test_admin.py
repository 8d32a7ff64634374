"""The reservations admin: hardcaps are edited there and show what they hold right now."""

from decimal import Decimal

import pytest
from django.urls import reverse

from reservations.models import Hardcap

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "url",
    [
        "admin:reservations_hardcap_changelist",
        "admin:reservations_hardcap_add",
        "admin:reservations_reservation_changelist",
        "admin:callbacks_subscription_changelist",
        "admin:callbacks_subscription_add",
        "admin:callbacks_delivery_changelist",
    ],
)
def test_the_admin_pages_render(admin_client, make_movement, url):
    make_movement()

    assert admin_client.get(reverse(url)).status_code == 200


def test_an_operator_adds_a_hardcap_and_the_asset_is_normalised(admin_client):
    response = admin_client.post(
        reverse("admin:reservations_hardcap_add"),
        {
            "asset": " eurc ",
            "source": "",
            "max_in_flight": "2500.50",
            "max_per_24h": "",
            "is_active": "on",
            "note": "",
        },
    )

    assert response.status_code == 302
    cap = Hardcap.objects.get(asset="EURC")
    assert (cap.source, cap.max_in_flight, cap.max_per_24h) == ("", Decimal("2500.50"), None)


def test_a_hardcap_must_be_positive(admin_client):
    page = admin_client.post(
        reverse("admin:reservations_hardcap_add"),
        {"asset": "EURC", "source": "", "max_in_flight": "0", "is_active": "on"},
    )

    assert page.status_code == 200
    assert not Hardcap.objects.filter(asset="EURC").exists()


def test_the_hardcap_list_shows_the_amount_in_flight(admin_client, make_movement):
    make_movement(amount="123.45")

    page = admin_client.get(reverse("admin:reservations_hardcap_changelist"))

    assert b"123.45" in page.content

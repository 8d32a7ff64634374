"""*My notifications*: every staff user chooses, per kind, at once / in the digest / never, for
themselves only."""

import pytest
from django.contrib.messages import get_messages

from notifications.models import Kind, Mode, NotificationPreference
from notifications.services import preferences_of

pytestmark = pytest.mark.django_db

PAGE = "/admin/notifications/notificationpreference/"


@pytest.mark.parametrize("username", ["olga", "ann", "sam", "vic", "sec"])
def test_every_role_finds_its_preferences_in_the_sidebar_and_opens_them(client, people, username):
    client.force_login(people[username])

    home = client.get("/admin/").content.decode()
    page = client.get(PAGE)

    assert f'href="{PAGE}"' in home
    assert page.status_code == 200
    assert 'id="qtg-preferences"' in page.content.decode()


def test_a_person_saves_their_own_choices(client, people):
    client.force_login(people["sam"])

    response = client.post(
        PAGE,
        {
            Kind.APPROVAL_WAITING: Mode.OFF,
            Kind.MANUAL_INTERVENTION: Mode.IMMEDIATE,
            Kind.ATTENTION: Mode.DIGEST,
            Kind.OVERRIDE_PROPOSAL: Mode.IMMEDIATE,
        },
    )

    assert response.status_code == 302
    assert "saved" in str(next(iter(get_messages(response.wsgi_request))))
    assert preferences_of(people["sam"])[Kind.ATTENTION] == Mode.DIGEST
    # nobody else's changed
    assert NotificationPreference.objects.filter(user=people["sue"]).exists() is False
    assert preferences_of(people["sue"])[Kind.ATTENTION] == Mode.IMMEDIATE


def test_a_bad_choice_is_refused_with_the_form_and_changes_nothing(client, people):
    client.force_login(people["sam"])

    response = client.post(PAGE, {Kind.APPROVAL_WAITING: "sometimes"})

    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    assert not NotificationPreference.objects.exists()


def test_no_one_opens_anothers_preferences_row(client, people):
    NotificationPreference.objects.create(user=people["sue"])
    client.force_login(people["sam"])

    assert client.get(PAGE + "1/change/").status_code == 404

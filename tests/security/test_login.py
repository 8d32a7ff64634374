"""Console sign-in: lockout after repeated failures (django-axes), a second factor for staff
who can approve, resolve or force (django-otp, required when QTG_OTP_REQUIRED is on), and
Django's full password validator set."""

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.urls import reverse
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

from tests.admin.helpers import changelist_url
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"


def sign_in(client, username, password, **extra):
    return client.post(
        LOGIN, {"username": username, "password": password, "next": "/admin/", **extra}
    )


def test_an_account_is_locked_after_repeated_failures(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    make_user("olga", is_staff=True)

    for _ in range(3):
        sign_in(client, "olga", "wrong")
    locked = sign_in(client, "olga", "pw-olga")

    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session


def test_a_correct_password_before_the_limit_signs_in(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    make_user("olga", is_staff=True)
    sign_in(client, "olga", "wrong")

    response = sign_in(client, "olga", "pw-olga")

    assert response.status_code == 302
    assert "_auth_user_id" in client.session


@pytest.fixture
def approver(settings):
    settings.QTG_OTP_REQUIRED = True
    return make_user("alice", "approve_movement", "view_movementrequest", is_staff=True)


def test_an_approver_without_an_authenticator_cannot_sign_in_when_required(client, approver):
    response = sign_in(client, "alice", "pw-alice")

    assert response.status_code == 200
    assert "needs a second factor" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_an_approver_signs_in_with_a_one_time_code(client, approver):
    device = TOTPDevice.objects.create(user=approver, name="phone", confirmed=True)

    without = sign_in(client, "alice", "pw-alice")
    code = str(totp(device.bin_key, step=device.step, digits=device.digits)).zfill(device.digits)
    with_code = sign_in(client, "alice", "pw-alice", otp_token=code)

    assert without.status_code == 200
    assert with_code.status_code == 302, with_code.context["form"].errors
    assert client.get(changelist_url()).status_code == 200


def test_a_session_without_the_second_factor_is_sent_back_to_sign_in(client, approver):
    client.force_login(approver)

    response = client.get(changelist_url())

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_staff_without_money_permissions_need_no_code(client, settings):
    settings.QTG_OTP_REQUIRED = True
    make_user("viewer", "view_movementrequest", is_staff=True)

    assert sign_in(client, "viewer", "pw-viewer").status_code == 302


@pytest.mark.parametrize(
    "password", ["short-pw", "password123456", "12345678901234", "alice.wonderland"]
)
def test_weak_passwords_are_refused(password):
    user = make_user("alice", email="alice.wonderland@example.com")

    with pytest.raises(ValidationError):
        validate_password(password, user)


def test_a_strong_password_is_accepted():
    validate_password("correct horse battery staple 42", make_user("alice"))

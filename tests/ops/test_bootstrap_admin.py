"""The first production superuser signs in: qtg_bootstrap_admin creates them with a TOTP
authenticator and prints the password and provisioning URI once."""

import re

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

pytestmark = pytest.mark.django_db


def test_the_bootstrapped_superuser_signs_in_with_the_printed_password_and_a_code(
    client, settings, capsys
):
    settings.QTG_OTP_REQUIRED = True

    call_command("qtg_bootstrap_admin", "root-admin", "--email", "ops@example.test")

    out = capsys.readouterr().out
    password = re.search(r"password: (\S+)", out)[1]
    uri = re.search(r"(otpauth://totp/\S+)", out)[1]
    user = User.objects.get(username="root-admin")
    device = TOTPDevice.objects.get(user=user)
    assert user.is_superuser and user.is_staff and device.confirmed
    assert device.config_url == uri

    without = client.post("/admin/login/", {"username": "root-admin", "password": password})
    code = str(totp(device.bin_key, step=device.step, digits=device.digits)).zfill(device.digits)
    signed_in = client.post(
        "/admin/login/",
        {"username": "root-admin", "password": password, "otp_token": code, "next": "/admin/"},
    )

    assert without.status_code == 200  # a code is asked for
    assert signed_in.status_code == 302, signed_in.context["form"].errors
    assert client.get("/admin/").status_code == 200


def test_it_is_refused_once_a_superuser_exists(capsys):
    call_command("qtg_bootstrap_admin", "first")

    with pytest.raises(CommandError, match="a superuser exists already"):
        call_command("qtg_bootstrap_admin", "second")
    assert not User.objects.filter(username="second").exists()

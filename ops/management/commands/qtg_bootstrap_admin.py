"""``manage.py qtg_bootstrap_admin <username>``: the first production superuser, who could not
sign in otherwise (the console requires a second factor of staff who may approve, resolve or
force, and nobody is there yet to register one). Creates the user with a generated password and
a confirmed TOTP authenticator in one transaction and prints both once: the password and the
``otpauth://`` provisioning URI to scan. Refused while any superuser exists (use the admin)."""

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django_otp.plugins.otp_totp.models import TOTPDevice


class Command(BaseCommand):
    help = "Create the first superuser with a TOTP authenticator; print its password and URI once."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--email", default="")

    def handle(self, *args, username: str, email: str = "", **options):
        users = get_user_model()
        with transaction.atomic():
            existing = users.objects.select_for_update().filter(is_superuser=True)
            if existing.exists():
                raise CommandError(
                    "a superuser exists already: add users and authenticators in the console"
                )
            if users.objects.filter(username=username).exists():
                raise CommandError(f"user {username!r} exists already")
            password = secrets.token_urlsafe(18)
            user = users.objects.create_superuser(username=username, email=email, password=password)
            device = TOTPDevice.objects.create(user=user, name="bootstrap", confirmed=True)
        self.stdout.write(f"superuser {username} created. Shown once, store them now:")
        self.stdout.write(f"  password: {password}")
        self.stdout.write(f"  authenticator (scan or paste into a TOTP app): {device.config_url}")

"""Mint an API token for a user and print its key (shown this once)."""

import getpass
import os
import socket
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from access.second_factor import second_factor_verified
from access.services import api_token_mint


def _who_runs_this() -> str:
    """The account, host and process that ran the command: the record names who minted."""
    return f"{getpass.getuser()}@{socket.gethostname()}:{os.getpid()}"[:110]


class Command(BaseCommand):
    help = "Mint an API token for USERNAME; prints the key (only its digest is stored)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--days", type=int, help="Lifetime (default QTG_API_TOKEN_DAYS).")
        parser.add_argument("--name", default="", help="What the token is for.")
        parser.add_argument(
            "--scopes", default="", help="Comma-separated: read, create, decide (default: all)."
        )
        parser.add_argument(
            "--otp",
            default="",
            help="The user's one-time code, required for a user who must use a second factor.",
        )

    def handle(self, *args, username, days=None, name="", scopes="", otp="", **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        proof = None
        if otp:
            if not second_factor_verified(user, otp):
                raise CommandError("the one-time code is wrong")
            proof = timezone.now()
        try:
            minted = api_token_mint(
                user=user,
                actor_label=f"manage.py api_token_create by {_who_runs_this()}",
                name=name,
                lifetime=timedelta(days=days) if days else None,
                scopes=[s.strip() for s in scopes.split(",") if s.strip()] or None,
                second_factor_at=proof,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(minted.key)

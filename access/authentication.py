"""``Authorization: Token <key>``: the key's digest is looked up (never the key), and an
expired or revoked token is refused like an unknown one."""

import re

from django.conf import settings
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from access.services import api_token_lookup

TOKEN_KEY_RE = re.compile(r"[0-9A-Za-z]{1,64}")


class ApiTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key: str):
        # A malformed key is refused before it reaches the database (a NUL byte in a header
        # would otherwise make PostgreSQL raise instead of say no).
        token = api_token_lookup(key) if TOKEN_KEY_RE.fullmatch(key) else None
        if token is not None:
            # request.auth is the token: its scopes decide what it may do (access/permissions).
            return (token.user, token)
        user = None
        if settings.QTG_API_LEGACY_TOKENS and TOKEN_KEY_RE.fullmatch(key):
            user = _legacy_token_user(key)
        if user is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        return (user, key)


def _legacy_token_user(key: str):
    """The active user of a DRF token (stored in clear; accepted only with
    QTG_API_LEGACY_TOKENS, the embedded profile's default)."""
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    return token.user if token is not None and token.user.is_active else None

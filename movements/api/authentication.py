import re

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

TOKEN_KEY_RE = re.compile(r"[0-9A-Za-z]{1,40}")


class StrictTokenAuthentication(TokenAuthentication):
    """DRF token authentication that refuses a malformed key before it reaches the database
    (a NUL byte in a header would otherwise make PostgreSQL raise instead of say no)."""

    def authenticate_credentials(self, key: str):
        if not TOKEN_KEY_RE.fullmatch(key):
            raise exceptions.AuthenticationFailed("Invalid token.")
        return super().authenticate_credentials(key)

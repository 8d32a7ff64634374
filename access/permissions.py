"""What an API token may do: its scopes (``read``, ``create``, ``decide``).

A view names the scope of each of its actions in ``token_scopes`` (action name -> scope);
otherwise a read (GET, HEAD, OPTIONS) needs ``read`` and anything else ``create``. Decisions
(approve, reject, cancel, resume) need ``decide``, which only a token its owner minted (with a
one-time code, for users who must use a second factor) carries (access/services.py). A
token minted without that code only reads once its user must use a second factor.
"""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from access.models import ApiToken
from access.second_factor import needs_second_factor
from access.services import CREATE, READ


def _lacks_second_factor(token: ApiToken, scope: str) -> bool:
    """A token minted without a second-factor proof (before its user held a money permission,
    or while the second factor was off) only reads once its user must use one."""
    return scope != READ and token.second_factor_at is None and needs_second_factor(token.user)


def required_scope(request, view) -> str:
    declared = getattr(view, "token_scopes", {}).get(getattr(view, "action", None))
    if declared:
        return declared
    return READ if request.method in SAFE_METHODS else CREATE


class TokenScope(BasePermission):
    """Refuses (403) a request its token's scopes do not cover."""

    def has_permission(self, request, view) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            # DRF's legacy clear-text tokens (embedded only): scopes did not exist for them.
            return True
        scope = required_scope(request, view)
        if token.allows(scope) and not _lacks_second_factor(token, scope):
            return True
        if token.allows(scope):
            self.message = (
                f"this token may not {scope}: it was minted without a second factor, which "
                f"{token.user.get_username()} must now use (mint a new one with a one-time code)"
            )
            return False
        self.message = (
            f"this token may not {scope}: its scopes are {', '.join(token.scopes) or 'none'}"
            + (
                " (a token minted for someone else never decides: its owner mints their own)"
                if scope == "decide" and token.minted_for_other
                else ""
            )
        )
        return False

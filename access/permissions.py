"""What an API token may do: its scopes (``read``, ``create``, ``decide``).

A view names the scope of each of its actions in ``token_scopes`` (action name -> scope);
otherwise a read (GET, HEAD, OPTIONS) needs ``read`` and anything else ``create``. Decisions
(approve, reject, cancel, resume) need ``decide``, which only a token its owner minted (with a
one-time code, for users who must use a second factor) carries (access/services.py).
"""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from access.models import ApiToken
from access.services import CREATE, READ


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
        if token.allows(scope):
            return True
        self.message = (
            f"this token may not {scope}: its scopes are {', '.join(token.scopes) or 'none'}"
            + (
                " (a token minted for someone else never decides: its owner mints their own)"
                if scope == "decide" and token.minted_for_other
                else ""
            )
        )
        return False

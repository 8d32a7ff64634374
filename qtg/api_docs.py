"""Who may read the API schema and its docs page: anyone on the embedded demo, a signed-in
user (console session or API token) when ``QTG_API_DOCS_REQUIRE_LOGIN`` is on (production's
default). Checked per request, so the setting can change without reloading the URLs."""

from django.conf import settings
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission

from access.authentication import ApiTokenAuthentication


class DocsAccess(BasePermission):
    def has_permission(self, request, view) -> bool:
        if not settings.QTG_API_DOCS_REQUIRE_LOGIN:
            return True
        return bool(request.user and request.user.is_authenticated)


DOCS_VIEW_OPTIONS = {
    "permission_classes": [DocsAccess],
    "authentication_classes": [SessionAuthentication, ApiTokenAuthentication],
}

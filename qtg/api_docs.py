"""Who may read the API schema and its docs page: anyone on the embedded demo, a signed-in
user (console session or API token) when ``QTG_API_DOCS_REQUIRE_LOGIN`` is on (production's
default). Checked per request, so the setting can change without reloading the URLs. An
anonymous caller refused is answered like the API answers it: 401 with `WWW-Authenticate`, as
`application/problem+json` (never the schema's YAML)."""

from django.conf import settings
from drf_spectacular.views import SpectacularAPIView
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer

from access.authentication import ApiTokenAuthentication


class DocsAccess(BasePermission):
    def has_permission(self, request, view) -> bool:
        if not settings.QTG_API_DOCS_REQUIRE_LOGIN:
            return True
        return bool(request.user and request.user.is_authenticated)


DOCS_VIEW_OPTIONS = {
    "permission_classes": [DocsAccess],
    # The token scheme first: a refusal names it in WWW-Authenticate (a 401, as the API's).
    "authentication_classes": [ApiTokenAuthentication, SessionAuthentication],
}


class SchemaView(SpectacularAPIView):
    """The OpenAPI document; a refusal is a problem document in JSON whatever was asked."""

    def finalize_response(self, request, response, *args, **kwargs):
        if response.status_code >= 400:
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)


def nullable_as_type_lists(result, generator, request, public):
    """OpenAPI 3.1 has no ``nullable``: what DRF's paginators and our hand-written schemas say
    with it becomes ``type: [..., "null"]`` (drf-spectacular does so for the fields it builds)."""

    def convert(node):
        if isinstance(node, dict):
            if node.pop("nullable", False) is True and isinstance(node.get("type"), str):
                node["type"] = [node["type"], "null"]
            for value in node.values():
                convert(value)
        elif isinstance(node, list):
            for value in node:
                convert(value)

    convert(result)
    return result


RETRY_AFTER = {
    "schema": {"type": "integer", "minimum": 0},
    "description": "Seconds to wait before retrying.",
}
REQUEST_ID = {
    "schema": {"type": "string"},
    "description": "The id of the request's log lines (also `details.request_id`): quote it.",
}


def problem_headers(result, generator, request, public):
    """The headers a problem answer carries, on every operation: `Retry-After` on each 429 and
    503 (and on a create's 409 `idempotency_in_progress`), `X-Request-ID` on each 500 and 503."""
    for item in result.get("paths", {}).values():
        for operation in item.values():
            responses = operation.get("responses", {})
            for status, headers in (
                ("429", {"Retry-After": {**RETRY_AFTER, "required": True}}),
                ("500", {"X-Request-ID": {**REQUEST_ID, "required": True}}),
                (
                    "503",
                    {
                        "Retry-After": {**RETRY_AFTER, "required": True},
                        "X-Request-ID": {**REQUEST_ID, "required": True},
                    },
                ),
            ):
                if status in responses:
                    responses[status].setdefault("headers", {}).update(headers)
            conflict = responses.get("409")
            if conflict and "`idempotency_in_progress`" in conflict.get("description", ""):
                conflict.setdefault("headers", {})["Retry-After"] = {
                    **RETRY_AFTER,
                    "required": False,
                    "description": "On `idempotency_in_progress`: seconds to wait before "
                    "retrying the create with the same key.",
                }
    return result

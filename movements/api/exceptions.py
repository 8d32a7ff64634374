"""The one exception handler of the API: every refusal becomes an RFC 9457 problem
(``application/problem+json``): ``type``, ``title``, ``status``, ``detail``, plus two
extension members, ``code`` (stable, machine-readable) and ``details`` (field errors or facts
about the refusal), with the status the domain error carries. ``detail`` is said once: the v1.0
shape's ``message`` copy of it is gone since contract 1.2.

Domain errors (``qtg.core.errors``) keep their code and details: 400 invalid input,
403 not permitted (four-eyes included), 404 not found, 409 an illegal or refused transition
(the details name the current state) or a create with the same Idempotency-Key still in
progress, 422 an Idempotency-Key reused with a different body. DRF's own errors (parse,
authentication, validation, method, media type) keep their status and headers.
"""

import logging
import uuid
from http import HTTPStatus
from typing import Any

import structlog
from django.core.exceptions import DisallowedHost
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults as django_pages
from django_fsm import ConcurrentTransition, TransitionNotAllowed
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from movements.models import MovementRequest
from qtg.core.errors import QTGError

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "urn:qtg:problem:"
REQUEST_ID_HEADER = "X-Request-ID"
# Seconds a client waits before retrying a 409 idempotency_in_progress, a 429 whose throttle
# cannot say, or a 503.
DEFAULT_RETRY_AFTER = 1
UNAVAILABLE_RETRY_AFTER = 5
# Statuses whose answer always says when to retry.
RETRY_STATUSES = (429, 503)

logger = logging.getLogger(__name__)


def request_id() -> str:
    """The id django-structlog bound to this request's log lines (one is made if none is)."""
    bound = structlog.contextvars.get_contextvars().get("request_id")
    return str(bound) if bound else str(uuid.uuid4())


def error_body(
    code: str, message: str, details: dict[str, Any] | None = None, *, status_code: int = 400
) -> dict[str, Any]:
    """The problem document of one refusal."""
    return {
        "type": PROBLEM_TYPE_BASE + code,
        "title": _title(status_code),
        "status": status_code,
        "detail": message,
        "code": code,
        "details": details or {},
    }


def _title(status_code: int) -> str:
    try:
        return HTTPStatus(status_code).phrase
    except ValueError:
        return "Error"


def problem(
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    *,
    status_code: int,
    headers: Any = None,
) -> Response:
    return Response(
        error_body(code, message, details, status_code=status_code),
        status=status_code,
        headers=dict(headers or {}),
        content_type=PROBLEM_CONTENT_TYPE,
    )


def _with_current_state(details: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """A 409 on a movement always names the state it is in now, so the client can decide."""
    pk = getattr(context.get("view"), "kwargs", {}).get("pk")
    if "current_state" in details or pk is None:
        return details
    try:
        pk = uuid.UUID(str(pk))
    except ValueError:
        return details
    state = MovementRequest.objects.filter(pk=pk).values_list("request_state", flat=True).first()
    return {**details, "current_state": state} if state else details


def server_failure_body(exc: BaseException) -> tuple[dict[str, Any], int, dict[str, str]]:
    """The problem document, status and headers of a failure nobody handled: 503 when the
    database is unreachable, 500 otherwise; both name the request id its log lines carry."""
    rid = request_id()
    headers = {REQUEST_ID_HEADER: rid}
    if isinstance(exc, OperationalError | InterfaceError):
        logger.error("database unavailable (request %s)", rid, exc_info=exc)
        headers["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER)
        body = error_body(
            "service_unavailable",
            "the database is unavailable: retry later",
            {"request_id": rid},
            status_code=503,
        )
        return body, 503, headers
    logger.error("unhandled failure (request %s)", rid, exc_info=exc)
    body = error_body(
        "server_error",
        "an unexpected error occurred: quote the request id when you report it",
        {"request_id": rid},
        status_code=500,
    )
    return body, 500, headers


def server_failure_response(exc: BaseException) -> JsonResponse:
    """``server_failure_body`` as a plain Django response (outside DRF's views)."""
    body, status_code, headers = server_failure_body(exc)
    response = JsonResponse(body, status=status_code, content_type=PROBLEM_CONTENT_TYPE)
    for name, value in headers.items():
        response[name] = value
    return response


# Django's own error pages under /api/, by status: the problem's code and what it says.
PAGE_PROBLEMS = {
    400: ("invalid", "the request is malformed"),
    403: ("permission_denied", "the request is forbidden"),
    404: ("not_found", "no such endpoint: {path}"),
    413: ("payload_too_large", "the body is too large"),
}


def page_problem(request: HttpRequest, status_code: int, exception=None) -> JsonResponse:
    """The problem document in place of Django's error page of ``status_code``."""
    if status_code >= 500:
        return server_failure_response(RuntimeError(f"HTTP {status_code}"))
    code, message = PAGE_PROBLEMS.get(status_code, ("invalid", "the request was refused"))
    if isinstance(exception, DisallowedHost):
        message = "the Host header names no host this service answers to"
    return JsonResponse(
        error_body(code, message.format(path=request.path), status_code=status_code),
        status=status_code,
        content_type=PROBLEM_CONTENT_TYPE,
    )


def _api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def _problem_under_api(status_code: int, django_page):
    """A root URLconf error handler (``qtg.urls``): under /api/ the problem document of
    ``status_code``, elsewhere ``django_page``. Django answers with these what it refuses
    before any view or middleware of ours can (an unknown or malformed Host, found by
    CommonMiddleware) and failures outside ApiProblemMiddleware. ``exception``: what Django
    passes with a 400, 403 or 404 (nothing with a 500)."""

    def handler(request: HttpRequest, exception=None) -> HttpResponse:
        if _api(request):
            return page_problem(request, status_code, exception)
        return django_page(request) if exception is None else django_page(request, exception)

    return handler


bad_request = _problem_under_api(400, django_pages.bad_request)
permission_denied = _problem_under_api(403, django_pages.permission_denied)
page_not_found = _problem_under_api(404, django_pages.page_not_found)
server_error = _problem_under_api(500, django_pages.server_error)


class ApiProblemMiddleware:
    """Under /api/: a failure that escapes a view, and Django's own error pages (an unknown
    path, a 500 from a middleware), answer with a problem document, never HTML."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not _api(request) or response.status_code < 400:
            return response
        if response.get("Content-Type", "").startswith(
            (PROBLEM_CONTENT_TYPE, "application/json", "application/vnd.oai")
        ):
            return response
        return page_problem(request, response.status_code)

    def process_exception(self, request, exc):
        if not _api(request):
            return None
        return server_failure_response(exc)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = _handle(exc, context)
    if response is not None and response.status_code in RETRY_STATUSES:
        # Every 429 and 503 says when to retry (DRF's throttles only when they know).
        response.setdefault("Retry-After", str(DEFAULT_RETRY_AFTER))
    return response


def _handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, QTGError):
        details = exc.details
        if exc.http_status == status.HTTP_409_CONFLICT:
            details = _with_current_state(details, context)
        headers = {}
        if exc.retry_after is not None:
            headers["Retry-After"] = str(exc.retry_after)
        return problem(exc.code, exc.message, details, status_code=exc.http_status, headers=headers)
    if isinstance(exc, ConcurrentTransition | TransitionNotAllowed):
        # Services lock rows before a transition, so this means someone else moved it first.
        return problem(
            "stale_state",
            "the movement changed meanwhile: read it again and retry",
            _with_current_state({}, context),
            status_code=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        # A bug or an outage: logged with the request id, answered as a problem (never HTML).
        body, status_code, headers = server_failure_body(exc)
        return Response(
            body, status=status_code, headers=headers, content_type=PROBLEM_CONTENT_TYPE
        )
    # DRF's own response carries the headers that matter (WWW-Authenticate, Retry-After, Allow).
    headers = {
        name: value
        for name, value in response.items()
        if name.lower() not in ("content-type", "content-length")
    }
    if isinstance(exc, exceptions.ValidationError):
        details = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        return problem(
            "invalid",
            "the request is invalid",
            details,
            status_code=response.status_code,
            headers=headers,
        )
    code = getattr(exc, "default_code", "error")
    detail = getattr(exc, "detail", "")
    return problem(
        code,
        str(detail) or code.replace("_", " "),
        status_code=response.status_code,
        headers=headers,
    )

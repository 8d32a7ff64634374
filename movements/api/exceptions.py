"""The one exception handler of the API: every refusal becomes an RFC 9457 problem
(``application/problem+json``): ``type``, ``title``, ``status``, ``detail``, plus two
extension members, ``code`` (stable, machine-readable) and ``details`` (field errors or facts
about the refusal), with the status the domain error carries (and ``message``, the same text as
``detail``, for clients of the v1.0 shape).

Domain errors (``qtg.core.errors``) keep their code and details: 400 invalid input,
403 not permitted (four-eyes included), 404 not found, 409 an illegal or refused transition
(the details name the current state) or a create with the same Idempotency-Key still in
progress, 422 an Idempotency-Key reused with a different body. DRF's own errors (parse,
authentication, validation, method, media type) keep their status and headers.
"""

import uuid
from http import HTTPStatus
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from django_fsm import ConcurrentTransition, TransitionNotAllowed
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from movements.models import MovementRequest
from qtg.core.errors import QTGError

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "urn:qtg:problem:"


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
        # The v1.0 error shape's name for ``detail``, kept for clients written against it.
        "message": message,
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


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, QTGError):
        details = exc.details
        if exc.http_status == status.HTTP_409_CONFLICT:
            details = _with_current_state(details, context)
        return problem(exc.code, exc.message, details, status_code=exc.http_status)
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
        return None  # a bug: let Django report it as a 500
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

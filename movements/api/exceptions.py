"""The one exception handler of the API: every refusal becomes the same JSON shape,
``{"code", "message", "details"}``, with the status the domain error carries.

Domain errors (``qtg.core.errors``) keep their code and details: 400 invalid input,
403 not permitted (four-eyes included), 404 not found, 409 an illegal or refused transition
(the details name the current state) or an idempotency conflict. DRF's own errors (parse,
authentication, validation, method, media type) keep their status and headers.
"""

import uuid
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from django_fsm import ConcurrentTransition, TransitionNotAllowed
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from movements.models import MovementRequest
from qtg.core.errors import QTGError


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "details": details or {}}


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
        return Response(error_body(exc.code, exc.message, details), status=exc.http_status)
    if isinstance(exc, ConcurrentTransition | TransitionNotAllowed):
        # Services lock rows before a transition, so this means someone else moved it first.
        return Response(
            error_body(
                "stale_state",
                "the movement changed meanwhile: read it again and retry",
                _with_current_state({}, context),
            ),
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a bug: let Django report it as a 500
    if isinstance(exc, exceptions.ValidationError):
        details = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        response.data = error_body("invalid", "the request is invalid", details)
    else:
        code = getattr(exc, "default_code", "error")
        detail = getattr(exc, "detail", "")
        response.data = error_body(code, str(detail) or code.replace("_", " "))
    return response

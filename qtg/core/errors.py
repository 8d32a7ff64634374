"""Domain errors. Each carries a stable code; the API maps them to one error shape."""

from typing import Any


class QTGError(Exception):
    code = "error"
    http_status = 400
    # Seconds after which retrying may succeed (the API's ``Retry-After``), when it may.
    retry_after: int | None = None

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InvalidInput(QTGError):
    """Input is malformed; nothing was written."""

    code = "invalid"
    http_status = 400


class TemplateInvalid(InvalidInput):
    """A route template (or its compilation against request params) is malformed."""

    code = "invalid_template"


class IllegalStateTransition(QTGError):
    """The transition is not an edge of the state table; nothing was written."""

    code = "illegal_state_transition"
    http_status = 409

    def __init__(self, *, subject: str, current: str, target: str, message: str = "") -> None:
        super().__init__(
            message or f"{subject} cannot move from {current} to {target}",
            details={"subject": subject, "current_state": current, "target_state": target},
        )
        self.subject = subject
        self.current = current
        self.target = target


class ActionRefused(QTGError):
    """The action is not possible in the current situation (in-flight nodes, expired, ...)."""

    code = "conflict"
    http_status = 409


class ReservationRefused(QTGError):
    """Taking the reservation would break a limit (or no limit is configured).

    ``message`` and ``details`` are what the client that asked may read; ``operator_message``
    and ``operator_details`` add what only operators see (the platform-wide amount in flight,
    which would otherwise tell any client how much money the platform is moving)."""

    code = "reservation_refused"
    http_status = 409

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        operator_message: str = "",
        operator_details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, details=details)
        self.operator_message = operator_message or message
        self.operator_details = operator_details or {}


class DestinationNotAllowlisted(QTGError):
    """The destination is not a vetted, usable entry of the address book."""

    code = "destination_not_allowlisted"
    http_status = 409


class TwoPersonRequired(ActionRefused):
    """The override is carried out only when a second supervisor confirms a proposal of it."""

    code = "two_person_required"


class AcknowledgementRequired(ActionRefused):
    """The action is allowed only with an explicit acknowledgement of its consequence."""

    code = "acknowledgement_required"


class StaleState(QTGError):
    """Someone else changed the row first; nothing was written."""

    code = "stale_state"
    http_status = 409


class IdempotencyConflict(QTGError):
    """The idempotency key was already used with a different body (the IETF draft's 422)."""

    code = "idempotency_key_reused"
    http_status = 422


class IdempotencyInProgress(QTGError):
    """A request with the same idempotency key is still being processed (the draft's 409)."""

    code = "idempotency_in_progress"
    http_status = 409
    retry_after = 1


class NotPermitted(QTGError):
    """The actor lacks the permission, or four-eyes forbids it."""

    code = "permission_denied"
    http_status = 403


class NotFound(QTGError):
    code = "not_found"
    http_status = 404

"""What every operator action does first: lock the movement's row (the lock its state
changes are made under) and insist on the reason the audit trail will carry."""

from typing import Any

from movements.models import MovementRequest
from qtg.core.errors import InvalidInput, NotFound


def lock_request(request: MovementRequest | Any) -> MovementRequest:
    """The movement (or its id), read again under its row lock; NotFound if there is none."""
    pk = request.pk if isinstance(request, MovementRequest) else request
    try:
        return MovementRequest.objects.select_for_update(no_key=True).get(pk=pk)
    except (MovementRequest.DoesNotExist, ValueError, TypeError):
        raise NotFound(f"movement {pk} does not exist") from None


def require_reason(reason: str, action: str) -> str:
    """``reason`` stripped; InvalidInput when there is none (``action`` names what needs it)."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput(f"a reason is required to {action}", details={"reason": ["required"]})
    return reason

"""What follows a request state change (the reservation effect and the callback event) and a
frontier that moved (its callback): every callback a movement causes is enqueued here.

The one table every request transition goes through, whoever caused it (derivation, an
operator, a worker). Reservations and callbacks are reached only through the ledger and the
outbox their apps provide (``movements.interface``), inside the same transaction as the state
change.
"""

from typing import Any

from movements import interface
from movements.services.derivation import should_release_reservation
from movements.states import RequestState

REQUEST_STATE_CALLBACKS: dict[RequestState, str] = {
    RequestState.APPROVED: "request_approved",
    RequestState.REJECTED: "request_rejected",
    RequestState.EXPIRED: "request_expired",
    RequestState.CANCELLED: "request_cancelled",
    RequestState.COMPLETED: "request_completed",
    RequestState.FAILED: "request_failed",
    RequestState.MANUAL_INTERVENTION: "request_attention",
    RequestState.WAITING_MANUAL_ACTION: "request_attention",
}


def after_request_transition(
    *, request: Any, old_state: str, new_state: RequestState, nodes: list[Any], actor: Any
) -> None:
    """Apply the post-transition table for ``new_state`` (the request row is already saved)."""
    reason = f"request {old_state} -> {new_state}"
    if new_state == RequestState.COMPLETED:
        interface.reservations().consume(request=request, actor=actor, reason=reason)
    elif should_release_reservation(request, nodes):
        interface.reservations().release(request=request, actor=actor, reason=reason)
    event_type = REQUEST_STATE_CALLBACKS.get(new_state)
    if event_type:
        interface.callbacks().enqueue(
            request=request, event_type=event_type, data={"previous_state": str(old_state)}
        )


def after_frontier_advanced(
    *, request: Any, woken: list[str], frontier: list[str], cause: dict[str, Any]
) -> None:
    """Nodes woke up (READY or SKIPPED): the ``frontier_advanced`` callback."""
    interface.callbacks().enqueue(
        request=request,
        event_type="frontier_advanced",
        data={"woken": woken, "frontier": frontier, **cause},
    )

"""What follows a request state change (the reservation effect, the callback event and the
notification of those who must act) and a frontier that moved (its callback): every callback a
movement causes is enqueued here.

The one table every request transition goes through, whoever caused it (derivation, an
operator, a worker). Reservations and callbacks are reached only through the ledger and the
outbox their apps provide (``movements.ports``), inside the same transaction as the state
change.
"""

from typing import Any

from movements import ports
from movements.services.derivation import should_release_reservation
from movements.states import RequestState

REQUEST_STATE_CALLBACKS: dict[RequestState, str] = {
    RequestState.PENDING_APPROVAL: "approval_pending",
    RequestState.APPROVED: "request_approved",
    RequestState.REJECTED: "request_rejected",
    RequestState.EXPIRED: "request_expired",
    RequestState.CANCELLED: "request_cancelled",
    RequestState.COMPLETED: "request_completed",
    RequestState.FAILED: "request_failed",
    RequestState.MANUAL_INTERVENTION: "request_attention",
    RequestState.WAITING_MANUAL_ACTION: "request_attention",
}
# States announced by a second, precise event after the first (``request_attention`` says
# "a person is needed" for both, as it always did; these say which).
REQUEST_STATE_PRECISE_CALLBACKS: dict[RequestState, str] = {
    RequestState.WAITING_MANUAL_ACTION: "request_waiting_manual_action",
    RequestState.MANUAL_INTERVENTION: "request_manual_intervention",
}

# States that someone must act on: the people who can are notified (``movements.ports.notify``).
REQUEST_STATE_NOTIFICATIONS: dict[RequestState, str] = {
    RequestState.PENDING_APPROVAL: "approval_waiting",
    RequestState.MANUAL_INTERVENTION: "manual_intervention",
}


# What a transition's audit detail adds to its callback's context: a withdrawal says who
# withdrew the movement and why (a rejection by an approver is told by previous_state alone).
WITHDRAWAL_CONTEXT = ("withdrawn_by", "reason")


def after_request_transition(
    *,
    request: Any,
    old_state: str,
    new_state: RequestState,
    nodes: list[Any],
    actor: Any,
    detail: dict[str, Any] | None = None,
) -> None:
    """Apply the post-transition table for ``new_state`` (the request row is already saved)."""
    reason = f"request {old_state} -> {new_state}"
    if new_state == RequestState.COMPLETED:
        ports.reservations().consume(request=request, actor=actor, reason=reason)
    elif should_release_reservation(request, nodes):
        ports.reservations().release(request=request, actor=actor, reason=reason)
    event_type = REQUEST_STATE_CALLBACKS.get(new_state)
    if event_type:
        context: dict[str, Any] = {"previous_state": str(old_state)}
        if detail and "withdrawn_by" in detail:
            context.update({key: detail[key] for key in WITHDRAWAL_CONTEXT if key in detail})
        if new_state == RequestState.PENDING_APPROVAL:
            context.update(approval_progress(request, received=0))
        ports.callbacks().enqueue(request=request, event_type=event_type, data=context)
    precise = REQUEST_STATE_PRECISE_CALLBACKS.get(new_state)
    if precise:
        ports.callbacks().enqueue(
            request=request, event_type=precise, data={"previous_state": str(old_state)}
        )
    kind = REQUEST_STATE_NOTIFICATIONS.get(new_state)
    if kind:
        ports.notify(kind=kind, request=request, actor=actor)


def approval_progress(request: Any, *, received: int) -> dict[str, int]:
    """The context of ``approval_pending``: what approving the movement takes, and how far."""
    return {"approvals_required": request.approvals_required, "approvals_received": received}


def after_request_created(*, request: Any) -> None:
    """A movement was received: ``request_created``, its first event."""
    ports.callbacks().enqueue(request=request, event_type="request_created", data={})


def after_approval_recorded(*, request: Any, received: int) -> None:
    """An approval was recorded and the movement still waits for more: ``approval_pending``
    with the count so far."""
    ports.callbacks().enqueue(
        request=request,
        event_type="approval_pending",
        data=approval_progress(request, received=received),
    )


def after_frontier_advanced(
    *, request: Any, woken: list[str], frontier: list[str], cause: dict[str, Any]
) -> None:
    """Nodes woke up (READY or SKIPPED): the ``frontier_advanced`` callback."""
    ports.callbacks().enqueue(
        request=request,
        event_type="frontier_advanced",
        data={"woken": woken, "frontier": frontier, **cause},
    )

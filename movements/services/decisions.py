"""Decisions before execution: approve (up to the approval policy's quorum), reject, withdraw,
expire.

Every service takes keyword-only arguments and the acting user or system component, locks the
rows it changes, asks the action's policy (``movements.policies``: the permission, four-eyes,
the state preconditions) and raises its refusal, and changes state only through
``set_request_state`` / ``set_node_state``. The permission is asked first, before the movement
is read, so a caller without it learns nothing about the movement.
"""

from typing import Any

from django.db import transaction
from django.utils import timezone

from movements.models import (
    MovementApproval,
    MovementRequest,
    MovementRequestNode,
)
from movements.policies import (
    Action,
    approve_refusal,
    distinct_approvers,
    expire_refusal,
    permission_refusal,
    quorum_met,
    reject_refusal,
    withdraw_refusal,
)
from movements.selectors import actor_groups, current_nodes, valid_approvals
from movements.services.approvals import (
    approval_add,
    approval_detail,
    refresh_requirement,
)
from movements.services.effects import after_approval_recorded
from movements.services.guards import lock_request, require_reason
from movements.services.progress import (
    compute_frontier,
    start_roots,
)
from movements.services.state import (
    record_event,
    save_fields,
    set_node_state,
    set_request_state,
)
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import (
    ActionRefused,
    NotFound,
)
from qtg.core.policies import enforce


def cancel_waiting_nodes(
    request: MovementRequest, nodes: list[MovementRequestNode], actor: Actor, reason: str
) -> None:
    """BLOCKED and READY nodes become CANCELLED (with ``reason``); the frontier follows."""
    for node in nodes:
        if node.node_state in (NodeState.BLOCKED, NodeState.READY):
            set_node_state(
                node=node, new_state=NodeState.CANCELLED, actor=actor, detail={"reason": reason}
            )
    request.current_frontier = compute_frontier(nodes)
    save_fields(request, ["current_frontier"])


@transaction.atomic
def movement_approve(*, request: MovementRequest | Any, actor: Actor) -> MovementRequest:
    """Record one approval, bound to the movement as it is now (plan, amount, asset, source,
    destination). Once the approval policy's quorum is met (distinct approvers, none the
    creator, the required groups covered): PENDING_APPROVAL -> APPROVED and the root nodes
    become READY; until then the movement stays PENDING_APPROVAL."""
    enforce(permission_refusal(actor, Action.APPROVE))
    request = lock_request(request)
    refresh_requirement(request, actor=actor)
    approvals: list[MovementApproval] = valid_approvals(request)
    enforce(
        approve_refusal(
            actor=actor,
            movement=request,
            now=timezone.now(),
            approvals=approvals,
            approver_groups=actor_groups(actor),
        )
    )
    approval = approval_add(request=request, actor=actor, approvals=approvals)
    detail = approval_detail(request, approval, approvals)
    if not quorum_met(request, approvals):
        # The movement stays PENDING_APPROVAL; the approval is its own audit record.
        record_event(request=request, actor=actor, detail=detail)
        after_approval_recorded(request=request, received=distinct_approvers(approvals))
        return request
    request.approved_by = actor.user
    request.approved_at = approval.approved_at
    set_request_state(
        request=request,
        new_state=RequestState.APPROVED,
        actor=actor,
        update_fields=["approved_by", "approved_at"],
        detail=detail,
    )
    start_roots(request, actor=actor)
    return request


def end_before_execution(
    request, *, new_state, actor, reason, detail=None, update_fields=()
) -> MovementRequest:
    """End a movement no node of which is in flight (rejected, withdrawn, expired, cancelled):
    its waiting nodes cancelled, the request to ``new_state`` with the reason."""
    request.failure_reason = reason
    nodes = current_nodes(request, lock=True)
    cancel_waiting_nodes(request, nodes, actor, reason)
    set_request_state(
        request=request,
        new_state=new_state,
        actor=actor,
        nodes=nodes,
        detail={"reason": reason, **(detail or {})},
        update_fields=["failure_reason", *update_fields],
    )
    return request


@transaction.atomic
def movement_reject(
    *, request: MovementRequest | Any, actor: Actor, reason: str
) -> MovementRequest:
    """PENDING_APPROVAL -> REJECTED with a reason; the reservation is released."""
    enforce(permission_refusal(actor, Action.REJECT))
    reason = require_reason(reason, "reject")
    request = lock_request(request)
    enforce(reject_refusal(actor=actor, movement=request))
    return end_before_execution(
        request, new_state=RequestState.REJECTED, actor=actor, reason=reason
    )


@transaction.atomic
def movement_withdraw(
    *, request: MovementRequest | Any, actor: Actor, reason: str
) -> MovementRequest:
    """The creator (or a supervisor) withdraws a movement waiting for approval:
    PENDING_APPROVAL -> REJECTED with the reason and who withdrew it; the reservation is
    released and the ``request_rejected`` callback says ``withdrawn_by``."""
    reason = require_reason(reason, "withdraw")
    request = lock_request(request)
    enforce(withdraw_refusal(actor=actor, movement=request))
    request.withdrawn_by = actor.user
    return end_before_execution(
        request,
        new_state=RequestState.REJECTED,
        actor=actor,
        reason=reason,
        detail={"withdrawn_by": actor.user.get_username() if actor.user else str(actor)},
        update_fields=["withdrawn_by"],
    )


@transaction.atomic
def movement_expire(*, request: MovementRequest | Any, actor: Actor) -> MovementRequest:
    """PENDING_APPROVAL -> EXPIRED once ``expires_at`` has passed."""
    request = lock_request(request)
    enforce(expire_refusal(movement=request, now=timezone.now()))
    return end_before_execution(
        request,
        new_state=RequestState.EXPIRED,
        actor=actor,
        reason=f"approval window closed at {request.expires_at.isoformat()}",
    )


def expire_overdue_approvals(*, actor: Actor, limit: int = 500) -> int:
    """Expire every PENDING_APPROVAL request past its ``expires_at``; return how many."""
    overdue = MovementRequest.objects.filter(
        request_state=RequestState.PENDING_APPROVAL, expires_at__lte=timezone.now()
    ).values_list("pk", flat=True)[:limit]
    expired = 0
    for pk in list(overdue):
        try:
            movement_expire(request=pk, actor=actor)
            expired += 1
        except (ActionRefused, NotFound):
            continue  # approved, rejected or expired by someone else meanwhile
    return expired

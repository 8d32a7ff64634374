"""Decisions before execution: approve (up to the approval policy's quorum), reject, withdraw,
expire.

Every service takes keyword-only arguments and the acting user or system component, locks the
rows it changes, asks the action's policy (``movements.policies``: the permission, four-eyes,
the state preconditions) and raises its refusal, and changes state only through
``set_request_state`` / ``set_node_state``. The permission is asked first, before the movement
is read, so a caller without it learns nothing about the movement.
"""

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from movements import ports
from movements.models import (
    MovementApproval,
    MovementEvent,
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
from movements.selectors import (
    actor_authority,
    current_nodes,
    details_held,
    movement_for_decision,
    unresolved_attentions,
)
from movements.services.approvals import (
    approval_add,
    approval_detail,
    plan_read,
    refresh_requirement,
)
from movements.services.effects import after_approval_recorded
from movements.services.guards import lock_request, require_reason
from movements.services.progress import (
    compute_frontier,
    remember_plan_graph,
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
from qtg.core.chain import GENESIS, heads_known
from qtg.core.compiled import Compiled
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


def _approvals(*, request: Any):
    return (
        MovementApproval.objects.filter(request=request)
        .select_related("approved_by")
        .order_by("pk")
    )


_APPROVALS = Compiled(_approvals, request=MovementApproval._meta.get_field("request"))


@transaction.atomic
def movement_approve(*, request: MovementRequest | Any, actor: Actor) -> MovementRequest:
    """Record one approval, bound to the movement as it is now (plan, amount, asset, source,
    destination). Once the approval policy's quorum is met (distinct approvers, none the
    creator, the required groups covered): PENDING_APPROVAL -> APPROVED and the root nodes
    become READY; until then the movement stays PENDING_APPROVAL.

    The movement is read once, under its lock, with what its callback events show; the
    events are built from what the service holds and written together (at most 15
    statements on PostgreSQL: tests/approvals/test_approve_statements.py)."""
    groups = actor_authority(actor)
    enforce(permission_refusal(actor, Action.APPROVE))
    request = _lock_for_decision(request)
    event_head = request.event_head or GENESIS
    with heads_known({MovementEvent: {request.pk: event_head}}):
        refresh_requirement(request, actor=actor)
        every = _APPROVALS(request=request.pk)
        approvals = sorted(
            (a for a in every if a.void_at is None), key=lambda a: (a.approved_at, a.pk)
        )
        enforce(
            approve_refusal(
                actor=actor,
                movement=request,
                now=timezone.now(),
                approvals=approvals,
                approver_groups=groups,
            )
        )
        nodes = current_nodes(request, lock=True)
        for node in nodes:
            node.request = request  # the locked instance: its events and changes refer to it
        binding, edges = plan_read(request)
        remember_plan_graph(request, edges)
        attentions = unresolved_attentions(request) if request.has_open_attention else []
        approval_head = every[-1].chain_hash if every else GENESIS
        with (
            heads_known({MovementApproval: {request.pk: approval_head}}),
            details_held(request, nodes=nodes, approvals=approvals, attentions=attentions),
            ports.callbacks().together(),
        ):
            _approve(request, actor, approvals, nodes, groups=groups, binding=binding)
    return request


def _lock_for_decision(request: MovementRequest | Any) -> MovementRequest:
    pk = request.pk if isinstance(request, MovementRequest) else request
    try:
        return movement_for_decision(pk)
    except (MovementRequest.DoesNotExist, ValueError, TypeError, ValidationError):
        raise NotFound(f"movement {pk} does not exist") from None


def _approve(
    request: MovementRequest,
    actor: Actor,
    approvals: list[MovementApproval],
    nodes: list[MovementRequestNode],
    *,
    groups: list[str],
    binding: str,
) -> None:
    approval = approval_add(
        request=request, actor=actor, approvals=approvals, groups=groups, binding=binding
    )
    detail = approval_detail(request, approval, approvals)
    if not quorum_met(request, approvals):
        # The movement stays PENDING_APPROVAL; the approval is its own audit record.
        record_event(request=request, actor=actor, detail=detail)
        after_approval_recorded(request=request, received=distinct_approvers(approvals))
        return
    request.approved_by = actor.user
    request.approved_at = approval.approved_at
    set_request_state(
        request=request,
        new_state=RequestState.APPROVED,
        actor=actor,
        update_fields=["approved_by", "approved_at"],
        detail=detail,
        nodes=nodes,
    )
    start_roots(request, actor=actor, nodes=nodes)


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

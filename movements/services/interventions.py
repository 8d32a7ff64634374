"""Operator interventions: cancel, resume a manual gate, resolve an UNKNOWN node, and the ways
out of MANUAL_INTERVENTION (resume, retry, force-complete, force-fail).

Every service takes keyword-only arguments and the acting user or system component, locks the
rows it changes, asks the action's policy (``movements.policies``: the permission, four-eyes,
the state preconditions, the two-person rule) and raises its refusal, and changes state only
through ``set_request_state`` / ``set_node_state``. The permission is asked first, before the
movement is read, so a caller without it learns nothing about the movement.
"""

from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from movements.models import (
    MovementRequest,
    MovementRequestNode,
    OverrideAction,
    OverrideProposal,
)
from movements.policies import (
    Action,
    cancel_refusal,
    force_complete_refusal,
    force_fail_refusal,
    funds_in_transit,
    intervention_resume_refusal,
    permission_refusal,
    resolve_outcome_refusal,
    resolve_unknown_refusal,
    resume_gate_refusal,
    retry_refusal,
    two_person_refusal,
    waiting_gates,
)
from movements.selectors import current_nodes
from movements.services.decisions import cancel_waiting_nodes, end_before_execution
from movements.services.guards import lock_request, require_reason
from movements.services.progress import (
    advance_after_completion,
    apply_request_state_from_nodes,
    new_attempt,
    refresh_frontier,
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
    InvalidInput,
)
from qtg.core.policies import enforce


@transaction.atomic
def movement_cancel(
    *,
    request: MovementRequest | Any,
    actor: Actor,
    reason: str,
    acknowledge_funds_in_transit: bool = False,
    override: OverrideProposal | None = None,
) -> MovementRequest:
    """EXECUTING/WAITING_MANUAL_ACTION -> CANCELLED; refused while any node is in flight
    (PREPARING..OBSERVING or UNKNOWN). BLOCKED and READY nodes become CANCELLED. After a side
    effect completed, only with the supervisor's permission and the acknowledgement that the
    funds in transit are no longer watched (their reservation stays HELD), and then as the
    confirmation of another supervisor's proposal (``override``) under the two-person rule."""
    enforce(permission_refusal(actor, Action.CANCEL))
    reason = require_reason(reason, "cancel")
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(
        cancel_refusal(
            actor=actor,
            movement=request,
            nodes=nodes,
            acknowledged=bool(acknowledge_funds_in_transit),
        )
    )
    in_transit = funds_in_transit(nodes)
    if in_transit:
        enforce(_two_person(OverrideAction.CANCEL_IN_TRANSIT, request, override))
        record_event(
            request=request,
            actor=actor,
            detail={
                "cancelled_with_funds_in_transit": in_transit,
                "acknowledged": True,
                "reason": reason,
            },
        )
    return end_before_execution(
        request, new_state=RequestState.CANCELLED, actor=actor, reason=reason
    )


def _two_person(action: str, request: MovementRequest, override: OverrideProposal | None):
    return two_person_refusal(
        action=action,
        movement=request,
        override=override,
        enabled=settings.QTG_TWO_PERSON_OVERRIDES,
    )


def _named(nodes: list[MovementRequestNode], node_key: str) -> MovementRequestNode:
    return next(n for n in nodes if n.node_key == node_key)


@transaction.atomic
def manual_gate_resume(
    *, request: MovementRequest | Any, actor: Actor, node_key: str | None = None, note: str = ""
) -> MovementRequest:
    """Release a READY manual gate: the gate completes and the frontier moves past it."""
    enforce(permission_refusal(actor, Action.RESUME_GATE))
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(resume_gate_refusal(actor=actor, movement=request, nodes=nodes, node_key=node_key))
    gates = waiting_gates(nodes, node_key)
    if len(gates) > 1:
        raise InvalidInput(
            "several manual gates are waiting: name one",
            details={"node_key": [g.node_key for g in gates]},
        )
    gate = gates[0]
    detail = {"released_by": str(actor), "note": note}
    if request.request_state == RequestState.WAITING_MANUAL_ACTION:
        set_request_state(
            request=request,
            new_state=RequestState.EXECUTING,
            actor=actor,
            nodes=nodes,
            detail={"manual_gate": gate.node_key, "note": note},
        )
    set_node_state(node=gate, new_state=NodeState.OBSERVING, actor=actor, detail=detail)
    set_node_state(node=gate, new_state=NodeState.COMPLETED, actor=actor, detail=detail)
    advance_after_completion(request, gate, actor=actor, nodes=nodes)
    return request


UNKNOWN_OUTCOMES = (NodeState.SUBMITTED, NodeState.COMPLETED, NodeState.FAILED)


@transaction.atomic
def node_resolve_unknown(
    *,
    request: MovementRequest | Any,
    node_key: str,
    outcome: str,
    evidence: Any,
    actor: Actor,
    external_ref: str = "",
    override: OverrideProposal | None = None,
) -> MovementRequest:
    """An operator reconciles an UNKNOWN node by hand, with the evidence that says so: as an
    outcome its executor can continue from (SUBMITTED only where it can watch a submit
    settle; COMPLETED; FAILED), with the venue's reference (withdrawal id, tx hash) where the
    steps after it need one. The reference is stored on the node and those steps run.
    "Never happened" (FAILED) is a two-person override: ``override`` is the confirmed
    proposal."""
    enforce(permission_refusal(actor, Action.RESOLVE_UNKNOWN))
    if outcome not in UNKNOWN_OUTCOMES:
        raise InvalidInput(
            "outcome must be SUBMITTED, COMPLETED or FAILED",
            details={"outcome": [f"not one of {', '.join(UNKNOWN_OUTCOMES)}"]},
        )
    if not evidence or (isinstance(evidence, str) and not evidence.strip()):
        raise InvalidInput(
            "evidence is required to resolve an UNKNOWN node", details={"evidence": ["required"]}
        )
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(resolve_unknown_refusal(actor=actor, movement=request, nodes=nodes, node_key=node_key))
    node = _named(nodes, node_key)
    enforce(resolve_outcome_refusal(node=node, outcome=outcome, external_ref=external_ref))
    if outcome == NodeState.FAILED:
        enforce(_two_person(OverrideAction.RESOLVE_NEVER_HAPPENED, request, override))
    node.lease_owner, node.lease_expires_at = "", None
    fields = ["lease_owner", "lease_expires_at"]
    detail = {"resolution": "manual", "evidence": evidence}
    if (external_ref or "").strip():
        node.external_ref = external_ref.strip()
        fields.append("external_ref")
        detail["external_ref"] = node.external_ref
    if outcome == NodeState.SUBMITTED:
        node.next_attempt_at = timezone.now()  # watched again at once
        fields.append("next_attempt_at")
    node.last_error = resolution_reason(f"resolving {node_key} as {outcome}", actor, str(evidence))
    fields.append("last_error")
    set_node_state(
        node=node,
        new_state=outcome,
        actor=actor,
        detail=detail,
        update_fields=fields,
    )
    if request.failure_reason:
        request.failure_reason = node.last_error
        save_fields(request, ["failure_reason"])
    if outcome == NodeState.COMPLETED:
        advance_after_completion(request, node, actor=actor, nodes=nodes)
    else:
        apply_request_state_from_nodes(request, actor=actor, nodes=nodes)
    return request


@transaction.atomic
def intervention_resume(
    *, request: MovementRequest | Any, actor: Actor, reason: str
) -> MovementRequest:
    """MANUAL_INTERVENTION -> EXECUTING once no node is FAILED or UNKNOWN; the frontier is
    re-examined so nodes whose predecessors are done wake up."""
    enforce(permission_refusal(actor, Action.INTERVENTION_RESUME))
    reason = require_reason(reason, "resume")
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(intervention_resume_refusal(actor=actor, movement=request, nodes=nodes))
    request.failure_reason = resolution_reason("resume", actor, reason)
    set_request_state(
        request=request,
        new_state=RequestState.EXECUTING,
        actor=actor,
        nodes=nodes,
        detail={"reason": reason},
        update_fields=["failure_reason"],
    )
    refresh_frontier(request, actor=actor)
    return request


@transaction.atomic
def intervention_retry(
    *, request: MovementRequest | Any, node_key: str, actor: Actor, reason: str
) -> MovementRequest:
    """A new attempt of a FAILED node. The failed attempt keeps its history and no longer
    counts in derivation; the request goes back to EXECUTING once nothing else is stuck."""
    enforce(permission_refusal(actor, Action.INTERVENTION_RETRY))
    reason = require_reason(reason, "retry")
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(retry_refusal(actor=actor, movement=request, nodes=nodes, node_key=node_key))
    failed = _named(nodes, node_key)
    nodes = new_attempt(request, failed, nodes, actor=actor, reason=reason)
    request.failure_reason = resolution_reason(f"retry of {node_key}", actor, reason)
    save_fields(request, ["failure_reason"])
    apply_request_state_from_nodes(request, actor=actor, nodes=nodes, detail={"reason": reason})
    return request


def resolution_reason(action: str, actor: Actor, reason: str) -> str:
    """The reason a movement shows once a person resolved it: who did what, and why (it
    replaces the venue's or recovery's reason that brought the movement to them)."""
    who = actor.user.get_username() if actor.user is not None else actor.id
    return f"resolved by {action} by {who}: {reason}"[:2000]


def _force_finish(
    request: MovementRequest,
    *,
    new_state: RequestState,
    actor: Actor,
    reason: str,
    override: OverrideProposal | None,
):
    nodes = current_nodes(request, lock=True)
    completing = new_state == RequestState.COMPLETED
    policy = force_complete_refusal if completing else force_fail_refusal
    enforce(policy(actor=actor, movement=request, nodes=nodes))
    action = OverrideAction.FORCE_COMPLETE if completing else OverrideAction.FORCE_FAIL
    enforce(_two_person(action, request, override))
    request.failure_reason = resolution_reason(
        "force-complete" if completing else "force-fail", actor, reason
    )
    cancel_waiting_nodes(request, nodes, actor, reason)
    set_request_state(
        request=request,
        new_state=new_state,
        actor=actor,
        nodes=nodes,
        detail={"reason": reason, "forced": True},
        update_fields=["failure_reason"],
    )
    return request


@transaction.atomic
def intervention_force_complete(
    *,
    request: MovementRequest | Any,
    actor: Actor,
    reason: str,
    override: OverrideProposal | None = None,
) -> MovementRequest:
    """MANUAL_INTERVENTION -> COMPLETED on an operator's word; the reservation is consumed.
    Under the two-person rule only as the confirmation of another supervisor's proposal
    (``override``; ``movements.services.overrides``)."""
    enforce(permission_refusal(actor, Action.FORCE_COMPLETE))
    reason = require_reason(reason, "force-complete")
    request = lock_request(request)
    return _force_finish(
        request, new_state=RequestState.COMPLETED, actor=actor, reason=reason, override=override
    )


@transaction.atomic
def intervention_force_fail(
    *,
    request: MovementRequest | Any,
    actor: Actor,
    reason: str,
    override: OverrideProposal | None = None,
) -> MovementRequest:
    """MANUAL_INTERVENTION -> FAILED on an operator's word; the reservation stays held when a
    side effect completed (an operator settles it). Under the two-person rule only as the
    confirmation of another supervisor's proposal (``override``)."""
    enforce(permission_refusal(actor, Action.FORCE_FAIL))
    reason = require_reason(reason, "force-fail")
    request = lock_request(request)
    return _force_finish(
        request, new_state=RequestState.FAILED, actor=actor, reason=reason, override=override
    )

"""Who may take which operator action on a movement, and when: the rules, written once.

One function per action returns a :class:`Refusal` naming the first rule that refuses, or None
when the action is allowed now. The services raise the refusal (its error class carries the
API's code and status: 403 for a missing permission and for four-eyes, 404 for a node that does
not exist, 409 for everything the situation refuses); the console offers a button exactly when
the function returns None for the user, explains a refusal from it, and sorts the rows of a
bulk action with it. Input validation (a reason, evidence, an outcome) stays in the services.

Each function takes what its rules read: the actor, the movement, its current nodes, the time,
and the node the action targets. The node-level actions (resume a manual gate, resolve an
UNKNOWN node, retry a node) called without ``node_key`` answer whether the action is possible
on some node: what the console asks before the operator picks one.

The permission comes first everywhere, four-eyes next (it is a matter of who, like the
permission), then the movement's state, then its nodes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from movements.choices import EntryStatus, NodeKind, OverrideAction, OverrideStatus, PolicyStatus
from movements.executors import registry
from movements.states import (
    IN_FLIGHT_NODE_STATES,
    RUNNING_NODE_STATES,
    TERMINAL_REQUEST_STATES,
    NodeState,
    RequestState,
)
from qtg.core import policies as core
from qtg.core.actors import Actor
from qtg.core.errors import (
    AcknowledgementRequired,
    InvalidInput,
    NotFound,
    NotPermitted,
    TwoPersonRequired,
)
from qtg.core.policies import Refusal, lacks_permission

if TYPE_CHECKING:  # the rows the rules read, named for the reader; never imported to run
    from movements.models import (
        AddressBookEntry,
        ApprovalPolicy,
        MovementRequest,
        MovementRequestNode,
        OverrideProposal,
    )

RS = RequestState
Nodes = Sequence["MovementRequestNode"]


class Action(StrEnum):
    """The operator's actions on a movement (the names are the console's URL slugs)."""

    APPROVE = "approve"
    REJECT = "reject"
    RESUME_GATE = "resume_gate"
    CANCEL = "cancel"
    RESOLVE_UNKNOWN = "resolve_unknown"
    INTERVENTION_RESUME = "intervention_resume"
    INTERVENTION_RETRY = "intervention_retry"
    FORCE_COMPLETE = "force_complete"
    FORCE_FAIL = "force_fail"
    SNOOZE_ATTENTION = "snooze_attention"
    RESOLVE_ATTENTION = "resolve_attention"
    STOP_WATCHING = "stop_watching"
    WITHDRAW = "withdraw"


# The custom permissions are declared on MovementRequest.Meta.permissions.
PERMISSIONS: dict[Action, str] = {
    Action.APPROVE: "movements.approve_movement",
    Action.REJECT: "movements.reject_movement",
    Action.RESUME_GATE: "movements.resume_manual_gate",
    Action.CANCEL: "movements.cancel_movement",
    Action.RESOLVE_UNKNOWN: "movements.resolve_unknown_node",
    Action.INTERVENTION_RESUME: "movements.resume_intervention",
    Action.INTERVENTION_RETRY: "movements.retry_node",
    Action.FORCE_COMPLETE: "movements.force_complete_movement",
    Action.FORCE_FAIL: "movements.force_fail_movement",
    Action.SNOOZE_ATTENTION: "movements.handle_attention",
    Action.RESOLVE_ATTENTION: "movements.handle_attention",
    Action.STOP_WATCHING: "movements.handle_attention",
    # Withdrawing one's own movement needs nothing more than having created it; this is the
    # supervisor's permission to withdraw anyone's.
    Action.WITHDRAW: "movements.withdraw_movement",
}
# Two-person overrides (``movements.services.overrides``): proposing one needs this on top of
# the action's own permission, confirming one needs the confirm permission and the action's.
PROPOSE_OVERRIDE_PERMISSION = "movements.propose_override"
CONFIRM_OVERRIDE_PERMISSION = "movements.confirm_override"
# Approval policies and address book entries: one person proposes, another decides.
PROPOSE_POLICY_PERMISSION = "movements.propose_approvalpolicy"
DECIDE_POLICY_PERMISSION = "movements.decide_approvalpolicy"
PROPOSE_ADDRESS_PERMISSION = "movements.propose_addressbookentry"
DECIDE_ADDRESS_PERMISSION = "movements.decide_addressbookentry"
# Cancelling after a side effect completed (funds in transit) needs this on top of cancel.
CANCEL_IN_TRANSIT_PERMISSION = "movements.cancel_in_transit"
# The body field (API) and form field (console) that acknowledges what such a cancel means.
ACKNOWLEDGE_FUNDS_IN_TRANSIT = "acknowledge_funds_in_transit"


class Rule(StrEnum):
    """The ``code`` of a refusal: which rule refused."""

    PERMISSION = core.PERMISSION
    FOUR_EYES = "four_eyes"
    STATE = "state"
    APPROVAL_WINDOW = "approval_window"
    IN_FLIGHT = "in_flight"
    NO_WAITING_GATE = "no_waiting_gate"
    NO_SUCH_NODE = "no_such_node"
    NODE_STATE = "node_state"
    STUCK_NODES = "stuck_nodes"
    RUNNING_NODES = "running_nodes"
    UNKNOWN_NODES = "unknown_nodes"
    ACKNOWLEDGEMENT = "acknowledgement_required"
    OUTCOME = "outcome"
    ALREADY_APPROVED = "already_approved"
    GROUPS = "approver_groups"
    TWO_PERSON = "two_person_required"
    EXPIRED = "expired"


APPROVAL_STATES = (RS.PENDING_APPROVAL,)
CANCELLABLE_STATES = (RS.EXECUTING, RS.WAITING_MANUAL_ACTION)
GATE_STATES = (RS.WAITING_MANUAL_ACTION, RS.EXECUTING)
INTERVENTION_STATES = (RS.MANUAL_INTERVENTION,)


# --- building blocks ---------------------------------------------------------------------------


def permission_refusal(actor: Actor, action: Action) -> Refusal | None:
    """The actor may not take ``action`` on any movement. Every policy below starts with it;
    a service asks it alone before it reads the movement, and the console before it offers a
    bulk action."""
    return lacks_permission(actor, PERMISSIONS[action])


def _state_refusal(movement: MovementRequest, action: str, *allowed: RequestState):
    if movement.request_state in allowed:
        return None
    return Refusal(
        Rule.STATE,
        f"cannot {action}: the movement is {movement.request_state}",
        {"current_state": movement.request_state, "allowed_states": [str(s) for s in allowed]},
    )


def _nodes_in(nodes: Nodes, states: Any) -> list[str]:
    return [n.node_key for n in nodes if n.node_state in states]


def _node(nodes: Nodes, node_key: str) -> MovementRequestNode | None:
    return next((n for n in nodes if n.node_key == node_key), None) if node_key else None


def _four_eyes_refusal(actor: Actor, movement: MovementRequest, doing: str) -> Refusal | None:
    """Four-eyes: nobody does ``doing`` on a movement they created."""
    if actor.user is not None and movement.created_by_id == actor.user.pk:
        return Refusal(
            Rule.FOUR_EYES, f"four-eyes: you cannot {doing} you created", error=NotPermitted
        )
    return None


def _no_such_node(node_key: str) -> Refusal:
    return Refusal(Rule.NO_SUCH_NODE, f"movement has no node {node_key!r}", error=NotFound)


def awaiting_approval(movement: MovementRequest) -> bool:
    """Approve, reject and expire apply only while the movement waits for its approval."""
    return movement.request_state in APPROVAL_STATES


def approval_open(movement: MovementRequest, now: datetime) -> bool:
    """The approval window has not closed (a movement without ``expires_at`` never closes)."""
    return movement.expires_at is None or movement.expires_at > now


def waiting_gates(nodes: Nodes, node_key: str | None = None) -> list[MovementRequestNode]:
    """The manual gates waiting for an operator (READY), or the one named ``node_key``."""
    return [
        n
        for n in nodes
        if n.kind == NodeKind.MANUAL_GATE
        and n.node_state == NodeState.READY
        and (not node_key or n.node_key == node_key)
    ]


# --- one policy per action ---------------------------------------------------------------------


def missing_groups(movement: MovementRequest, approvals: Sequence[Any]) -> list[str]:
    """The groups the movement's approval needs an approver from and has none from yet."""
    covered = {group for approval in approvals for group in approval.groups}
    return [group for group in movement.approval_groups if group not in covered]


def same_approver(approval: Any, actor: Actor) -> bool:
    """Whether ``approval`` was given by ``actor``: the same user id (a renamed user is still
    the same person), or for a system actor the same recorded name."""
    if actor.user is not None:
        return approval.approved_by_id == actor.user.pk
    return approval.approved_by_id is None and approval.approver == str(actor)


def distinct_approvers(approvals: Sequence[Any]) -> int:
    """How many different people (by user id) or system actors the approvals come from."""
    return len({a.approved_by_id or f"system:{a.approver}" for a in approvals})


def quorum_met(movement: MovementRequest, approvals: Sequence[Any]) -> bool:
    """Enough distinct approvers, and at least one from each required group."""
    enough = distinct_approvers(approvals) >= movement.approvals_required
    return enough and not missing_groups(movement, approvals)


def approve_refusal(
    *,
    actor: Actor,
    movement: MovementRequest,
    now: datetime,
    approvals: Sequence[Any],
    approver_groups: Collection[str],
) -> Refusal | None:
    """Approve: the permission; four-eyes (nobody approves a movement they created, nor
    twice); the movement waits for approval and its window is open; the approver's groups
    (when the approvals still needed must all come from groups the movement's policy names,
    the approver belongs to one of them). ``approvals`` are the valid approvals so far and
    ``approver_groups`` the groups of the acting user (``movements.selectors``)."""
    if refusal := permission_refusal(actor, Action.APPROVE):
        return refusal
    if refusal := _four_eyes_refusal(actor, movement, "approve a movement"):
        return refusal
    if refusal := _state_refusal(movement, "approve", *APPROVAL_STATES):
        return refusal
    if not approval_open(movement, now):
        closed_at = movement.expires_at.isoformat()
        return Refusal(
            Rule.APPROVAL_WINDOW,
            f"cannot approve: the approval window closed at {closed_at}",
            {"current_state": movement.request_state, "expires_at": closed_at},
        )
    if any(same_approver(approval, actor) for approval in approvals):
        return Refusal(
            Rule.ALREADY_APPROVED,
            "you already approved this movement: the next approval must be someone else's",
            {"approvals": len(approvals), "approvals_required": movement.approvals_required},
            error=NotPermitted,
        )
    missing = missing_groups(movement, approvals)
    slots_left = max(movement.approvals_required - distinct_approvers(approvals), 1)
    if missing and len(missing) >= slots_left and not set(missing) & set(approver_groups):
        return Refusal(
            Rule.GROUPS,
            f"the approval still needed must come from {' or '.join(missing)}",
            {"missing_groups": missing, "approvals": len(approvals)},
            error=NotPermitted,
        )
    return None


def reject_refusal(*, actor: Actor, movement: MovementRequest) -> Refusal | None:
    """Reject: the permission; the movement waits for approval."""
    return permission_refusal(actor, Action.REJECT) or _state_refusal(
        movement, "reject", *APPROVAL_STATES
    )


def withdraw_refusal(*, actor: Actor, movement: MovementRequest) -> Refusal | None:
    """Withdraw: by the movement's creator, or by a holder of the withdraw permission (a
    supervisor); the movement waits for approval (PENDING_APPROVAL -> REJECTED, a legal edge
    of the spec's table)."""
    creator = actor.user is not None and movement.created_by_id == actor.user.pk
    if not creator and (refusal := permission_refusal(actor, Action.WITHDRAW)):
        return Refusal(
            refusal.code,
            "only the movement's creator, or a holder of movements.withdraw_movement, may "
            "withdraw it",
            refusal.details,
            error=refusal.error,
        )
    return _state_refusal(movement, "withdraw", *APPROVAL_STATES)


def expire_refusal(*, movement: MovementRequest, now: datetime) -> Refusal | None:
    """Expire (the system's, no permission): the movement waits for approval and its window
    has closed."""
    if refusal := _state_refusal(movement, "expire", *APPROVAL_STATES):
        return refusal
    if approval_open(movement, now):
        return Refusal(
            Rule.APPROVAL_WINDOW,
            "cannot expire: the approval window is still open",
            {"current_state": movement.request_state},
        )
    return None


def funds_in_transit(nodes: Nodes) -> list[str]:
    """The side-effect nodes that completed: money left a venue and may not have arrived."""
    return [n.node_key for n in nodes if n.has_side_effect and n.node_state == NodeState.COMPLETED]


def cancel_refusal(
    *, actor: Actor, movement: MovementRequest, nodes: Nodes, acknowledged: bool = True
) -> Refusal | None:
    """Cancel: the permission; the movement is executing or waiting at a manual gate; no node
    is in flight (PREPARING..OBSERVING or UNKNOWN), since money may be moving there. After a
    side effect completed the funds are in transit: cancelling stops watching them while
    their reservation stays HELD, so it needs the supervisor's permission too and an explicit
    acknowledgement (``acknowledged``; the console asks with True and makes its form ask)."""
    if refusal := permission_refusal(actor, Action.CANCEL) or _state_refusal(
        movement, "cancel", *CANCELLABLE_STATES
    ):
        return refusal
    if in_flight := _nodes_in(nodes, IN_FLIGHT_NODE_STATES):
        return Refusal(
            Rule.IN_FLIGHT,
            f"cannot cancel while money may be in flight at {', '.join(in_flight)}",
            {"current_state": movement.request_state, "in_flight_nodes": in_flight},
        )
    if in_transit := funds_in_transit(nodes):
        if refusal := lacks_permission(actor, CANCEL_IN_TRANSIT_PERMISSION):
            return refusal
        if not acknowledged:
            return Refusal(
                Rule.ACKNOWLEDGEMENT,
                f"{', '.join(in_transit)} completed: the funds are in transit. Cancelling stops "
                f"watching them and keeps the reservation HELD; set "
                f"{ACKNOWLEDGE_FUNDS_IN_TRANSIT} to confirm",
                {
                    "current_state": movement.request_state,
                    "completed_side_effects": in_transit,
                    "acknowledgement": ACKNOWLEDGE_FUNDS_IN_TRANSIT,
                },
                error=AcknowledgementRequired,
            )
    return None


def resume_gate_refusal(
    *, actor: Actor, movement: MovementRequest, nodes: Nodes, node_key: str | None = None
) -> Refusal | None:
    """Resume a manual gate: the permission; the movement is executing or waiting at a gate;
    a manual gate (the one named, when one is) is waiting."""
    if refusal := permission_refusal(actor, Action.RESUME_GATE):
        return refusal
    if refusal := _four_eyes_refusal(actor, movement, "release a manual gate of a movement"):
        return refusal
    if refusal := _state_refusal(movement, "resume a manual gate", *GATE_STATES):
        return refusal
    if not waiting_gates(nodes, node_key):
        return Refusal(
            Rule.NO_WAITING_GATE,
            f"no manual gate {node_key or ''} is waiting".replace("  ", " "),
            {"current_state": movement.request_state},
        )
    return None


def resolve_unknown_refusal(
    *, actor: Actor, movement: MovementRequest, nodes: Nodes, node_key: str | None = None
) -> Refusal | None:
    """Resolve an UNKNOWN node by hand: the permission; the node exists and is UNKNOWN (some
    node is, without ``node_key``); the movement has not ended."""
    if refusal := permission_refusal(actor, Action.RESOLVE_UNKNOWN):
        return refusal
    if node_key is None:
        if not _nodes_in(nodes, {NodeState.UNKNOWN}):
            return Refusal(
                Rule.NODE_STATE, "no node is UNKNOWN", {"current_state": movement.request_state}
            )
    elif (node := _node(nodes, node_key)) is None:
        return _no_such_node(node_key)
    elif node.node_state != NodeState.UNKNOWN:
        return Refusal(
            Rule.NODE_STATE,
            f"node {node_key} is {node.node_state}, not UNKNOWN",
            {"current_state": node.node_state},
        )
    if movement.request_state in TERMINAL_REQUEST_STATES:
        return Refusal(
            Rule.STATE,
            f"cannot resolve an UNKNOWN node: the movement is {movement.request_state}",
            {"current_state": movement.request_state},
        )
    return None


def intervention_resume_refusal(
    *, actor: Actor, movement: MovementRequest, nodes: Nodes
) -> Refusal | None:
    """Resume a movement in MANUAL_INTERVENTION: the permission; the state; no node is FAILED
    or UNKNOWN (those are retried or resolved first)."""
    if refusal := permission_refusal(actor, Action.INTERVENTION_RESUME) or _state_refusal(
        movement, "resume", *INTERVENTION_STATES
    ):
        return refusal
    if stuck := _nodes_in(nodes, {NodeState.FAILED, NodeState.UNKNOWN}):
        return Refusal(
            Rule.STUCK_NODES,
            f"cannot resume while {', '.join(stuck)} is FAILED or UNKNOWN: retry or resolve it",
            {"current_state": movement.request_state, "nodes": stuck},
        )
    return None


def retry_refusal(
    *, actor: Actor, movement: MovementRequest, nodes: Nodes, node_key: str | None = None
) -> Refusal | None:
    """Retry a node of a movement in MANUAL_INTERVENTION: the permission; the state; the node
    exists and is FAILED (some node is, without ``node_key``)."""
    if refusal := permission_refusal(actor, Action.INTERVENTION_RETRY) or _state_refusal(
        movement, "retry", *INTERVENTION_STATES
    ):
        return refusal
    if node_key is None:
        if not _nodes_in(nodes, {NodeState.FAILED}):
            return Refusal(
                Rule.NODE_STATE, "no node is FAILED", {"current_state": movement.request_state}
            )
        return None
    node = _node(nodes, node_key)
    if node is None:
        return _no_such_node(node_key)
    if node.node_state != NodeState.FAILED:
        return Refusal(
            Rule.NODE_STATE,
            f"only a FAILED node can be retried; {node_key} is {node.node_state}",
            {"current_state": node.node_state},
        )
    return None


def _force_refusal(actor: Actor, movement: MovementRequest, nodes: Nodes, action: Action):
    if refusal := permission_refusal(actor, action) or _state_refusal(
        movement, action.replace("_", "-"), *INTERVENTION_STATES
    ):
        return refusal
    if running := _nodes_in(nodes, RUNNING_NODE_STATES):
        return Refusal(
            Rule.RUNNING_NODES,
            f"cannot force while {', '.join(running)} is still running",
            {"current_state": movement.request_state, "running_nodes": running},
        )
    # An UNKNOWN node may have moved money: its outcome is settled with evidence (resolve),
    # not overridden by ending the movement around it while recovery still reconciles it.
    if unknown := _nodes_in(nodes, {NodeState.UNKNOWN}):
        return Refusal(
            Rule.UNKNOWN_NODES,
            f"cannot force while {', '.join(unknown)} is UNKNOWN: resolve it with evidence first",
            {"current_state": movement.request_state, "unknown_nodes": unknown},
        )
    return None


def force_complete_refusal(
    *, actor: Actor, movement: MovementRequest, nodes: Nodes
) -> Refusal | None:
    """Force-complete a movement in MANUAL_INTERVENTION: the permission; the state; no node is
    running or UNKNOWN."""
    return _force_refusal(actor, movement, nodes, Action.FORCE_COMPLETE)


def force_fail_refusal(*, actor: Actor, movement: MovementRequest, nodes: Nodes) -> Refusal | None:
    """Force-fail a movement in MANUAL_INTERVENTION: the permission; the state; no node is
    running or UNKNOWN."""
    return _force_refusal(actor, movement, nodes, Action.FORCE_FAIL)


def resolvable_outcomes(node: MovementRequestNode) -> list[NodeState]:
    """What an UNKNOWN node may be resolved as: what its executor can continue from. SUBMITTED
    ("it happened, keep watching") only for an executor that can watch a submit settle."""
    try:
        observes = registry.get(node.executor).can_observe()
    except LookupError:
        observes = False
    return [
        *([NodeState.SUBMITTED] if observes else []),
        NodeState.COMPLETED,
        NodeState.FAILED,
    ]


def external_ref_needed(node: MovementRequestNode, outcome: str) -> str:
    """The name of the venue reference (withdrawal id, tx hash) an operator must give when
    resolving ``node`` as ``outcome``: what the nodes after it look the money up by. Empty
    when none is needed."""
    if outcome not in (NodeState.SUBMITTED, NodeState.COMPLETED):
        return ""
    try:
        return registry.get(node.executor).external_ref_name
    except LookupError:
        return ""


def resolve_outcome_refusal(
    *, node: MovementRequestNode, outcome: str, external_ref: str = ""
) -> Refusal | None:
    """The outcome is one the node's executor can continue from, with the reference its
    successors need."""
    allowed = resolvable_outcomes(node)
    if outcome not in allowed:
        return Refusal(
            Rule.OUTCOME,
            f"{node.node_key} can be resolved as {', '.join(allowed)} only: its executor "
            f"{node.executor} cannot continue from {outcome}",
            {"outcome": [f"not one of {', '.join(allowed)}"]},
            error=InvalidInput,
        )
    needed = external_ref_needed(node, outcome)
    if needed and not (external_ref or "").strip() and not node.external_ref:
        return Refusal(
            Rule.OUTCOME,
            f"resolving {node.node_key} as {outcome} needs its {needed}: the steps after it "
            f"look the money up by it",
            {"external_ref": [f"required: the {needed}"]},
            error=InvalidInput,
        )
    return None


def attention_refusal(
    *,
    actor: Actor,
    movement: MovementRequest,
    open_attention_keys: Collection[str],
    node_key: str | None = None,
) -> Refusal | None:
    """Snooze or resolve what a movement needs attention for: the permission; an open entry
    (of the node named, when one is). ``open_attention_keys``: the node key of each of the
    movement's open entries (``movements.selectors.open_attention_keys``)."""
    if refusal := permission_refusal(actor, Action.RESOLVE_ATTENTION):
        return refusal
    if not open_attention_keys or (node_key is not None and node_key not in open_attention_keys):
        return Refusal(
            Rule.NODE_STATE,
            f"nothing about {node_key or 'this movement'} needs attention",
            {"current_state": movement.request_state},
        )
    return None


def stop_watching_refusal(
    *, actor: Actor, movement: MovementRequest, nodes: Nodes, node_key: str | None = None
) -> Refusal | None:
    """Stop watching an observe node (it goes FAILED with the operator's evidence): the
    permission; the node exists, is an observe node and is OBSERVING (some node is, without
    ``node_key``)."""
    if refusal := permission_refusal(actor, Action.STOP_WATCHING):
        return refusal
    watched = [
        n for n in nodes if n.kind == NodeKind.OBSERVE and n.node_state == NodeState.OBSERVING
    ]
    if node_key is None:
        if not watched:
            return Refusal(
                Rule.NODE_STATE,
                "no observe node is being watched",
                {"current_state": movement.request_state},
            )
        return None
    node = _node(nodes, node_key)
    if node is None:
        return _no_such_node(node_key)
    if node not in watched:
        return Refusal(
            Rule.NODE_STATE,
            f"only an OBSERVING observe node can stop being watched; {node_key} is "
            f"{node.node_state}",
            {"current_state": node.node_state},
        )
    return None


# --- two-person overrides, approval policies, the address book --------------------------------

# What each override carries out, and the permission of that action.
OVERRIDE_PERMISSIONS: dict[str, str] = {
    OverrideAction.FORCE_COMPLETE: PERMISSIONS[Action.FORCE_COMPLETE],
    OverrideAction.FORCE_FAIL: PERMISSIONS[Action.FORCE_FAIL],
    OverrideAction.CANCEL_IN_TRANSIT: CANCEL_IN_TRANSIT_PERMISSION,
    OverrideAction.RESOLVE_NEVER_HAPPENED: PERMISSIONS[Action.RESOLVE_UNKNOWN],
}


def two_person_refusal(
    *, action: str, movement: MovementRequest, override: OverrideProposal | None, enabled: bool
) -> Refusal | None:
    """An override (``action``, an OverrideAction) is carried out only as the confirmation of
    another supervisor's proposal of exactly that action on that movement, while two-person
    overrides are ``enabled``."""
    if not enabled:
        return None
    if (
        override is not None
        and override.request_id == movement.pk
        and override.action == action
        and override.status == OverrideStatus.CONFIRMED
        and override.confirmed_by_id not in (None, override.proposed_by_id)
    ):
        return None
    label = OverrideAction(action).label.lower()
    return Refusal(
        Rule.TWO_PERSON,
        f"two-person rule: {label} is proposed by one supervisor and confirmed by another",
        {"current_state": movement.request_state, "override": str(action)},
        error=TwoPersonRequired,
    )


def override_subject_refusal(
    *,
    actor: Actor,
    movement: MovementRequest,
    nodes: Nodes,
    action: str,
    node_key: str = "",
) -> Refusal | None:
    """What the override's own action requires now (its permission, the movement's state,
    its nodes), asked both when it is proposed and when it is confirmed."""
    if action == OverrideAction.FORCE_COMPLETE:
        return force_complete_refusal(actor=actor, movement=movement, nodes=nodes)
    if action == OverrideAction.FORCE_FAIL:
        return force_fail_refusal(actor=actor, movement=movement, nodes=nodes)
    if action == OverrideAction.CANCEL_IN_TRANSIT:
        if refusal := cancel_refusal(actor=actor, movement=movement, nodes=nodes):
            return refusal
        if not funds_in_transit(nodes):
            return Refusal(
                Rule.NODE_STATE,
                "no side effect completed: cancel it directly, no override is needed",
                {"current_state": movement.request_state},
            )
        return None
    if action == OverrideAction.RESOLVE_NEVER_HAPPENED:
        return resolve_unknown_refusal(
            actor=actor, movement=movement, nodes=nodes, node_key=node_key or None
        )
    return Refusal(Rule.OUTCOME, f"unknown override {action!r}", error=InvalidInput)


def override_propose_refusal(
    *,
    actor: Actor,
    movement: MovementRequest,
    nodes: Nodes,
    action: str,
    node_key: str = "",
) -> Refusal | None:
    """Propose an override: the propose permission; then whatever its action requires now."""
    return lacks_permission(actor, PROPOSE_OVERRIDE_PERMISSION) or override_subject_refusal(
        actor=actor, movement=movement, nodes=nodes, action=action, node_key=node_key
    )


def override_confirm_refusal(
    *, actor: Actor, proposal: OverrideProposal, now: datetime
) -> Refusal | None:
    """Confirm an override: the confirm permission and the action's; not the person who
    proposed it; the proposal is open and has not expired. (The action's own rules are asked
    again when it is carried out.)"""
    if refusal := lacks_permission(actor, CONFIRM_OVERRIDE_PERMISSION) or lacks_permission(
        actor, OVERRIDE_PERMISSIONS[proposal.action]
    ):
        return refusal
    if actor.user is None or actor.user.pk == proposal.proposed_by_id:
        return Refusal(
            Rule.FOUR_EYES,
            "two-person rule: the proposal must be confirmed by another supervisor",
            error=NotPermitted,
        )
    if proposal.status != OverrideStatus.PROPOSED:
        return Refusal(
            Rule.STATE,
            f"the proposal is {proposal.status}",
            {"current_state": proposal.status},
        )
    if proposal.is_expired(now):
        return Refusal(
            Rule.EXPIRED,
            f"the proposal expired at {proposal.expires_at.isoformat()}: propose it again",
            {"expires_at": proposal.expires_at.isoformat()},
        )
    return None


def _second_person_refusal(actor: Actor, permission: str, row: Any, what: str):
    if refusal := lacks_permission(actor, permission):
        return refusal
    if actor.user is None or actor.user.pk == row.proposed_by_id:
        return Refusal(
            Rule.FOUR_EYES,
            f"four-eyes: {what} is decided by someone other than who proposed it",
            error=NotPermitted,
        )
    if row.status not in (PolicyStatus.PROPOSED, EntryStatus.PROPOSED):
        return Refusal(Rule.STATE, f"{row} is {row.status}", {"current_state": row.status})
    return None


def policy_decide_refusal(*, actor: Actor, policy: ApprovalPolicy) -> Refusal | None:
    """Activate or reject a proposed approval policy version: the permission; not its
    proposer; it is still proposed."""
    return _second_person_refusal(actor, DECIDE_POLICY_PERMISSION, policy, "a policy change")


def address_decide_refusal(*, actor: Actor, entry: AddressBookEntry) -> Refusal | None:
    """Approve or reject a proposed address book entry: the permission; not its proposer; it
    is still proposed."""
    return _second_person_refusal(actor, DECIDE_ADDRESS_PERMISSION, entry, "an address")


def address_remove_refusal(*, actor: Actor, entry: AddressBookEntry) -> Refusal | None:
    """Remove an active entry (no four-eyes: removing only ever refuses more)."""
    if refusal := lacks_permission(actor, DECIDE_ADDRESS_PERMISSION):
        return refusal
    if entry.status != EntryStatus.ACTIVE:
        return Refusal(Rule.STATE, f"{entry} is {entry.status}", {"current_state": entry.status})
    return None

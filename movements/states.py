"""The two-level state model: request states, node states and their legal transitions.

The tables are the spec's, edge for edge, with one documented extension: BLOCKED -> CANCELLED
and READY -> CANCELLED (the spec names a terminal CANCELLED node state for operator
cancellation but gives no edge into it). The models' transition methods are generated from
these tables, so the two can never drift.
"""

from collections.abc import Mapping
from enum import StrEnum


class RequestState(StrEnum):
    RECEIVED = "RECEIVED"
    VALIDATED = "VALIDATED"
    PENDING_APPROVAL = "PENDING_APPROVAL"
    APPROVED = "APPROVED"
    EXECUTING = "EXECUTING"
    WAITING_MANUAL_ACTION = "WAITING_MANUAL_ACTION"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    MANUAL_INTERVENTION = "MANUAL_INTERVENTION"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"

    @classmethod
    def choices(cls) -> list[tuple[str, str]]:
        return [(s.value, s.value.replace("_", " ").title()) for s in cls]


class NodeState(StrEnum):
    BLOCKED = "BLOCKED"
    READY = "READY"
    PREPARING = "PREPARING"
    AWAITING_SIGNATURE = "AWAITING_SIGNATURE"
    SUBMITTING = "SUBMITTING"
    SUBMITTED = "SUBMITTED"
    OBSERVING = "OBSERVING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"

    @classmethod
    def choices(cls) -> list[tuple[str, str]]:
        return [(s.value, s.value.replace("_", " ").title()) for s in cls]


RS = RequestState
NS = NodeState

REQUEST_TRANSITIONS: Mapping[RequestState, set[RequestState]] = {
    RS.RECEIVED: {RS.VALIDATED, RS.FAILED},
    RS.VALIDATED: {RS.PENDING_APPROVAL},
    RS.PENDING_APPROVAL: {RS.APPROVED, RS.REJECTED, RS.EXPIRED},
    RS.APPROVED: {RS.EXECUTING, RS.FAILED},
    RS.EXECUTING: {
        RS.COMPLETED,
        RS.FAILED,
        RS.MANUAL_INTERVENTION,
        RS.WAITING_MANUAL_ACTION,
        RS.CANCELLED,
    },
    RS.WAITING_MANUAL_ACTION: {RS.EXECUTING, RS.CANCELLED},
    RS.MANUAL_INTERVENTION: {RS.EXECUTING, RS.FAILED, RS.COMPLETED},
    RS.COMPLETED: set(),
    RS.FAILED: set(),
    RS.REJECTED: set(),
    RS.EXPIRED: set(),
    RS.CANCELLED: set(),
}

NODE_TRANSITIONS: Mapping[NodeState, set[NodeState]] = {
    # CANCELLED from BLOCKED and READY is QTG's one extension (DESIGN.md section 2).
    NS.BLOCKED: {NS.READY, NS.SKIPPED, NS.CANCELLED},
    NS.READY: {NS.PREPARING, NS.OBSERVING, NS.SKIPPED, NS.FAILED, NS.CANCELLED},
    NS.PREPARING: {NS.READY, NS.AWAITING_SIGNATURE, NS.SUBMITTING, NS.FAILED},
    NS.AWAITING_SIGNATURE: {NS.READY, NS.SUBMITTING, NS.FAILED},
    NS.SUBMITTING: {NS.SUBMITTED, NS.COMPLETED, NS.FAILED, NS.UNKNOWN},
    NS.SUBMITTED: {NS.OBSERVING, NS.COMPLETED, NS.FAILED, NS.UNKNOWN},
    NS.OBSERVING: {NS.COMPLETED, NS.FAILED, NS.UNKNOWN},
    NS.UNKNOWN: {NS.SUBMITTED, NS.COMPLETED, NS.FAILED},
    NS.COMPLETED: set(),
    NS.FAILED: set(),
    NS.CANCELLED: set(),
    NS.SKIPPED: set(),
}

TERMINAL_REQUEST_STATES: frozenset[RequestState] = frozenset(
    state for state, targets in REQUEST_TRANSITIONS.items() if not targets
)
TERMINAL_NODE_STATES: frozenset[NodeState] = frozenset(
    state for state, targets in NODE_TRANSITIONS.items() if not targets
)

# The states whose nature the spec's table gives as running or observing.
RUNNING_NODE_STATES: frozenset[NodeState] = frozenset(
    {NS.PREPARING, NS.AWAITING_SIGNATURE, NS.SUBMITTING, NS.SUBMITTED, NS.OBSERVING}
)
# A node in one of these may have money in flight: cancellation is refused while any is.
IN_FLIGHT_NODE_STATES: frozenset[NodeState] = RUNNING_NODE_STATES | {NS.UNKNOWN}
DONE_NODE_STATES: frozenset[NodeState] = frozenset({NS.COMPLETED, NS.SKIPPED})
# Requests an operator may be asked to act on.
ATTENTION_REQUEST_STATES: frozenset[RequestState] = frozenset(
    {RS.PENDING_APPROVAL, RS.WAITING_MANUAL_ACTION, RS.MANUAL_INTERVENTION}
)


def can_transition_request_state(current: RequestState, new_state: RequestState) -> bool:
    """True when ``current -> new_state`` is an edge of REQUEST_TRANSITIONS."""
    try:
        return RequestState(new_state) in REQUEST_TRANSITIONS[RequestState(current)]
    except ValueError:
        return False


def can_transition_node_state(current: NodeState, new_state: NodeState) -> bool:
    """True when ``current -> new_state`` is an edge of NODE_TRANSITIONS."""
    try:
        return NodeState(new_state) in NODE_TRANSITIONS[NodeState(current)]
    except ValueError:
        return False

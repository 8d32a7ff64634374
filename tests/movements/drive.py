"""Drive a movement's nodes through legal transitions the way a worker would (for tests)."""

from django.db import transaction

from movements.models import MovementRequest, MovementRequestNode
from movements.services import (
    advance_after_completion,
    apply_request_state_from_nodes,
    set_node_state,
    set_request_state,
)
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor

WORKER = Actor.system("test-worker")

PATHS = {
    NodeState.COMPLETED: {
        "ACTION": [NodeState.PREPARING, NodeState.SUBMITTING, NodeState.COMPLETED],
        "OBSERVE": [NodeState.OBSERVING, NodeState.COMPLETED],
    },
    NodeState.FAILED: {
        "ACTION": [NodeState.PREPARING, NodeState.SUBMITTING, NodeState.FAILED],
        "OBSERVE": [NodeState.OBSERVING, NodeState.FAILED],
    },
    NodeState.UNKNOWN: {
        "ACTION": [NodeState.PREPARING, NodeState.SUBMITTING, NodeState.UNKNOWN],
        "OBSERVE": [NodeState.OBSERVING, NodeState.UNKNOWN],
    },
    NodeState.OBSERVING: {
        "ACTION": [
            NodeState.PREPARING,
            NodeState.SUBMITTING,
            NodeState.SUBMITTED,
            NodeState.OBSERVING,
        ],
        "OBSERVE": [NodeState.OBSERVING],
    },
}


def node(request: MovementRequest, key: str) -> MovementRequestNode:
    return MovementRequestNode.objects.current().get(request=request, node_key=key)


def states(request: MovementRequest) -> dict[str, str]:
    return dict(
        MovementRequestNode.objects.current()
        .filter(request=request)
        .values_list("node_key", "node_state")
    )


@transaction.atomic
def run_node(request: MovementRequest, key: str, outcome: NodeState) -> MovementRequest:
    """Take a READY node to ``outcome`` and let the request follow, like a worker."""
    request = MovementRequest.objects.select_for_update().get(pk=request.pk)
    if request.request_state == RequestState.APPROVED:
        set_request_state(request=request, new_state=RequestState.EXECUTING, actor=WORKER)
    target = node(request, key)
    for state in PATHS[outcome][target.kind]:
        set_node_state(node=target, new_state=state, actor=WORKER)
    if outcome == NodeState.COMPLETED:
        advance_after_completion(request, target, actor=WORKER)
    elif outcome in (NodeState.FAILED, NodeState.UNKNOWN):
        apply_request_state_from_nodes(request, actor=WORKER)
    request.refresh_from_db()
    return request

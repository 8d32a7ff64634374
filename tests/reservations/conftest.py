"""Drive movements through the real services: node progress the way the workers report it,
and the operators' lifecycle actions."""

import pytest
from django.db import transaction

from movements.actors import Actor
from movements.models import MovementRequest
from movements.selectors import current_nodes
from movements.services import (
    advance_after_completion,
    apply_request_state_from_nodes,
    set_node_state,
    set_request_state,
)
from movements.states import NodeState, RequestState

ACTION_PATH = (NodeState.PREPARING, NodeState.SUBMITTING)
OBSERVE_PATH = (NodeState.OBSERVING,)


class Driver:
    """Moves a request's nodes along the edges a worker would, under the request lock."""

    def __init__(self) -> None:
        self.worker = Actor.system("tests-worker")

    def _locked(self, request):
        request = MovementRequest.objects.select_for_update().get(pk=request.pk)
        nodes = current_nodes(request, lock=True)
        return request, nodes, {node.node_key: node for node in nodes}

    def _dispatch(self, request, nodes) -> None:
        if request.request_state == RequestState.APPROVED:
            set_request_state(request=request, new_state=RequestState.EXECUTING,
                              actor=self.worker, nodes=nodes)

    @transaction.atomic
    def run(self, request, key: str, *, outcome: NodeState = NodeState.COMPLETED):
        """Dispatch a READY node and take it to ``outcome`` (COMPLETED or FAILED)."""
        request, nodes, by_key = self._locked(request)
        node = by_key[key]
        self._dispatch(request, nodes)
        path = ACTION_PATH if node.kind == "ACTION" else OBSERVE_PATH
        for state in (*path, outcome):
            set_node_state(node=node, new_state=state, actor=self.worker)
        if outcome == NodeState.COMPLETED:
            advance_after_completion(request, node, actor=self.worker, nodes=nodes)
        else:
            apply_request_state_from_nodes(request, actor=self.worker, nodes=nodes)
        request.refresh_from_db()
        return request

    @transaction.atomic
    def dispatch_and_requeue(self, request, key: str):
        """The first dispatch starts the request, then the node goes back to READY (a
        transient error before submit): EXECUTING with nothing in flight."""
        request, nodes, by_key = self._locked(request)
        self._dispatch(request, nodes)
        node = by_key[key]
        set_node_state(node=node, new_state=NodeState.PREPARING, actor=self.worker)
        set_node_state(node=node, new_state=NodeState.READY, actor=self.worker)
        request.refresh_from_db()
        return request


@pytest.fixture
def drive() -> Driver:
    return Driver()

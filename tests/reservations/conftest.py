"""Drive movements through the real services: node progress the way the workers report it
(tests/movements/drive.py), plus the one situation that module does not stage."""

import pytest
from django.db import transaction

from movements.models import MovementRequest
from movements.services import set_node_state, set_request_state
from movements.states import NodeState, RequestState
from tests.movements.drive import WORKER, node, run_node


class Driver:
    def run(self, request, key: str, *, outcome: NodeState = NodeState.COMPLETED):
        """Dispatch a READY node and take it to ``outcome``; the request follows."""
        return run_node(request, key, outcome)

    @transaction.atomic
    def dispatch_and_requeue(self, request, key: str):
        """The first dispatch starts the request, then the node goes back to READY (a
        transient error before submit): EXECUTING with nothing in flight."""
        request = MovementRequest.objects.select_for_update().get(pk=request.pk)
        if request.request_state == RequestState.APPROVED:
            set_request_state(request=request, new_state=RequestState.EXECUTING, actor=WORKER)
        target = node(request, key)
        set_node_state(node=target, new_state=NodeState.PREPARING, actor=WORKER)
        set_node_state(node=target, new_state=NodeState.READY, actor=WORKER)
        request.refresh_from_db()
        return request


@pytest.fixture
def drive() -> Driver:
    return Driver()

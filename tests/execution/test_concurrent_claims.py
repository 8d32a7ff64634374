"""Several workers (threads, each with its own connection) claiming at once on PostgreSQL:
SKIP LOCKED hands every node to exactly one of them."""

import threading

import pytest
from django.db import connection

from movements.models import MovementRequest, MovementRequestNode
from movements.services import execution
from movements.states import RequestState
from tests.execution.conftest import assert_history_replays, ledger

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_concurrent_workers_claim_each_node_once_and_side_effects_happen_once(make_movement):
    requests = [make_movement(approve=True) for _ in range(30)]
    errors: list[BaseException] = []
    claims: list[int] = []
    lock = threading.Lock()
    original = execution.claim_ready_node

    def recording_claim(**kwargs):
        claim = original(**kwargs)
        if claim is not None:
            with lock:
                claims.append(claim.node_id)
        return claim

    def work(name: str) -> None:
        try:
            for _ in range(400):
                if not MovementRequest.objects.exclude(
                    request_state=RequestState.COMPLETED
                ).exists():
                    return
                execution.dispatch_ready_nodes(owner=name)
                execution.observe_submitted_nodes(owner=name)
                execution.recover_unknown_nodes(owner=name)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    execution.claim_ready_node = recording_claim
    try:
        threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        execution.claim_ready_node = original

    assert errors == []
    assert len(claims) == len(set(claims)), "a node was claimed twice"
    assert set(MovementRequest.objects.values_list("request_state", flat=True)) == {
        RequestState.COMPLETED
    }
    assert len(ledger("withdraw")) == len(requests)
    assert set(
        MovementRequestNode.objects.filter(node_key="withdraw").values_list(
            "dispatch_count", flat=True
        )
    ) == {1}
    for request in requests:
        request.refresh_from_db()
        assert_history_replays(request)

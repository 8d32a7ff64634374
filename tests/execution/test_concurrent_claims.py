"""Several workers (threads, each with its own connection) claiming at once on PostgreSQL:
SKIP LOCKED hands every node to exactly one of them."""

import threading

import pytest
from django.db import transaction

from movements.models import MovementRequest, MovementRequestNode
from movements.selectors import current_nodes
from movements.services import execution
from movements.services.execution import sweeps
from movements.services.guards import lock_request
from movements.states import RequestState
from tests.execution.conftest import assert_history_replays, ledger
from tests.threads import own_connection

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_concurrent_workers_claim_each_node_once_and_side_effects_happen_once(make_movement):
    requests = [make_movement(approve=True) for _ in range(30)]
    errors: list[BaseException] = []
    claims: list[int] = []
    lock = threading.Lock()
    original = sweeps.claim_ready_nodes

    def recording_claim(**kwargs):
        batch = original(**kwargs)
        with lock:
            claims.extend(claim.node_id for claim in batch)
        return batch

    @own_connection(errors)
    def work(name: str) -> None:
        for _ in range(400):
            if not MovementRequest.objects.exclude(request_state=RequestState.COMPLETED).exists():
                return
            execution.dispatch_ready_nodes(owner=name)
            execution.observe_submitted_nodes(owner=name)
            execution.recover_unknown_nodes(owner=name)

    sweeps.claim_ready_nodes = recording_claim
    try:
        threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        sweeps.claim_ready_nodes = original

    assert errors == []
    assert len(claims) == 3 * len(requests)  # every node of every movement, once
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


def test_a_node_enters_submitting_while_an_operator_holds_its_movement_and_sees_it_running(
    make_movement,
):
    """The compare-and-set into SUBMITTING takes no lock: it refuses by itself when a node
    of the movement FAILED. An operator holding the movement (the lock every action takes
    first) does not hold the submit up, and sees the node running (PREPARING or SUBMITTING,
    money possibly moving either way) when it then locks the nodes: no cycle, no verdict."""
    request = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    locked, release, submitting = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []
    seen: list[str] = []
    original_submit = claim.executor.submit

    def submit(ctx):
        submitting.set()
        return original_submit(ctx)

    claim.executor.submit = submit

    @own_connection(errors)
    def operator() -> None:
        with transaction.atomic():
            lock_request(request)  # the lock every operator action takes first
            locked.set()
            release.wait(timeout=20)
            nodes = current_nodes(request, lock=True)  # and then its nodes
            seen.extend(n.node_state for n in nodes if n.node_key == claim.node.node_key)

    @own_connection(errors)
    def worker() -> None:
        execution.run_action(claim)

    holder = threading.Thread(target=operator)
    holder.start()
    assert locked.wait(timeout=10)
    runner = threading.Thread(target=worker)
    runner.start()
    submitted_while_held = submitting.wait(timeout=10)
    release.set()
    holder.join(timeout=20)
    runner.join(timeout=20)

    assert errors == []
    assert submitted_while_held, "entering SUBMITTING waited for the operator's lock"
    assert seen and seen[0] in {"SUBMITTING", "COMPLETED"}
    node = MovementRequestNode.objects.get(pk=claim.node_id)
    assert node.node_state == "COMPLETED"


def test_while_a_first_claim_of_one_action_node_is_open_another_worker_claims_the_next(
    make_movement,
):
    # The first claim locks only what it claims: a claim of the others' in the same moment
    # (the fanned-out sweep on an idle worker) finds them, not rows locked and left unclaimed.
    requests = [make_movement(approve=True) for _ in range(3)]
    errors: list[BaseException] = []
    taken: list = []

    @own_connection(errors)
    def other_worker() -> None:
        taken.extend(execution.claim_ready_nodes(owner="w2", limit=8))

    with transaction.atomic():
        first = execution.claim_ready_nodes(owner="w1", limit=8, actions=1)
        thread = threading.Thread(target=other_worker)
        thread.start()
        thread.join(timeout=30)

    assert errors == []
    assert len(first) == 1 and len(taken) == 2
    assert {c.request_id for c in first + taken} == {r.pk for r in requests}

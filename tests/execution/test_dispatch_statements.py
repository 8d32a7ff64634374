"""What one node dispatch costs the database: the approvals re-check at every claim in three
queries for the whole batch, the callback events of a result write built from the rows it
holds (showing the movement exactly as a fresh read would), and a ceiling on the statements of
one movement's dispatches, a node at a time (issue 24's latency, issue 34's budgets)."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from callbacks import services as callback_services
from callbacks.models import Event
from movements.api.serializers import MovementSerializer, shared_serializer
from movements.executors.base import DeterministicError, Observation, ObservedStatus
from movements.models import MovementRequest
from movements.selectors import ROWS_HELD, movements_with_details
from movements.services import execution
from movements.services.approvals import void_changed_approvals
from qtg.core.actors import Actor
from tests.execution.conftest import settle
from tests.statements import statements

pytestmark = pytest.mark.django_db


def test_the_approvals_recheck_of_a_claim_reads_approvals_quorum_and_plans_in_three_queries(
    make_movement,
):
    requests = [make_movement(approve=True) for _ in range(3)]

    with CaptureQueriesContext(connection) as queries:
        refused = void_changed_approvals(requests, actor=Actor.system("test"))

    assert refused == {}
    assert len(statements(queries)) == 3  # approvals, recorded quorums, plan nodes + edges


def test_the_approvals_recheck_still_refuses_a_plan_changed_after_approval(make_movement):
    from movements.models import MovementPlanNode

    request = make_movement(approve=True)
    MovementPlanNode.objects.filter(request=request, key="withdraw").update(
        config={"network": "elsewhere"}
    )

    refused = void_changed_approvals([request], actor=Actor.system("test"))

    assert "approval missing or altered" in refused[request.pk]


@pytest.fixture
def payloads_checked(monkeypatch):
    """Each callback payload built from rows a result write holds, compared with a fresh read
    of the movement at the same moment (the writes before it are in the database)."""
    from movements import public

    checked = []

    def checking(movements):
        payloads = public.movement_payloads(movements)
        held = [m.pk for m in movements if getattr(m, ROWS_HELD, False)]
        serializer = shared_serializer(MovementSerializer)
        for fresh in movements_with_details().filter(pk__in=held):
            assert payloads[fresh.pk] == dict(serializer.to_representation(fresh))
            checked.append(payloads[fresh.pk]["request_state"])
        return payloads

    monkeypatch.setattr(callback_services, "movement_payloads", checking)
    return checked


def test_a_completed_movements_events_show_it_from_the_rows_the_result_write_holds(
    make_movement, payloads_checked
):
    request = settle(make_movement(approve=True))

    assert request.request_state == "COMPLETED"
    assert payloads_checked[-1] == "COMPLETED"
    completed = json.loads(Event.objects.filter(request=request).latest("sequence").body)
    assert completed["type"] == "request_completed"
    assert completed["data"]["reservation"]["state"] == "CONSUMED"
    assert completed["data"]["approvals"]  # read beside the held rows


def test_a_failed_movements_events_show_it_from_the_rows_the_result_write_holds(
    make_movement, payloads_checked, monkeypatch
):
    request = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")

    def refuse(ctx):
        raise DeterministicError("address not whitelisted")

    monkeypatch.setattr(claim.executor, "submit", refuse)
    execution.run_action(claim)

    request.refresh_from_db()
    assert request.request_state == "FAILED"
    assert payloads_checked == ["FAILED"]
    failed = json.loads(Event.objects.filter(request=request).latest("sequence").body)
    assert failed["type"] == "request_failed"
    assert failed["data"]["reservation"]["state"] == "RELEASED"


def test_an_attention_raised_by_a_result_write_is_in_the_events_it_causes(
    make_movement, payloads_checked
):
    request = make_movement(approve=True)
    execution.dispatch_ready_nodes(owner="w1", limit=1)  # the withdraw: its observer READY
    claim = execution.claim_ready_node(owner="w1")
    claim.executor.observe = lambda ctx: Observation(
        status=ObservedStatus.COMPLETED,
        detail={"attention": {"reason": "stuck", "message": "look at the venue"}},
    )

    execution.run_observes([claim])

    assert "EXECUTING" in payloads_checked
    raised = [
        json.loads(event.body)
        for event in Event.objects.filter(request=request, event_type="node_attention")
    ]
    assert raised
    assert [entry["reason"] for entry in raised[0]["data"]["attention"]] == ["stuck"]


def run_claimed_action(make_movement):
    """An approved movement's first node claimed, then run: the movement, the claim and the
    statements the run sent."""
    request = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    with CaptureQueriesContext(connection) as queries:
        execution.run_action(claim)
    return request, claim, statements(queries)


def test_a_result_write_reads_no_movement_row_or_node_again_for_its_events(make_movement):
    request, _, sent = run_claimed_action(make_movement)

    reads = [
        sql
        for sql in sent
        if sql.startswith("SELECT")
        and (
            'FROM "movements_movementrequest"' in sql
            or 'FROM "movements_movementrequestnode"' in sql
        )
    ]
    # The result write's lock of the movement and of its nodes; nothing read again.
    assert len(reads) == 2, reads
    assert MovementRequest.objects.get(pk=request.pk).request_state == "EXECUTING"


# The claim of one action node (with the approvals re-check) and its run: the compare-and-set
# to SUBMITTING, the submit and the result write with its callback event, on the portable
# writer, the sandbox venue's own statements aside. main before issue 24's latency work: 26;
# 23 before the result write took its audit head from its node locks.
DISPATCH_STATEMENTS_CEILING = 22


def test_one_action_node_dispatch_stays_under_its_statement_ceiling(make_movement):
    make_movement(approve=True)

    with CaptureQueriesContext(connection) as queries:
        claim = execution.claim_ready_node(owner="w1")
        execution.run_action(claim)

    sent = [sql for sql in statements(queries) if '"sandbox_' not in sql]
    assert claim.node.node_state == "COMPLETED"  # the sandbox exchange answers at once
    assert len(sent) <= DISPATCH_STATEMENTS_CEILING, "\n".join(sent)


def test_a_result_write_links_its_events_after_the_head_its_locks_read(make_movement):
    """The result transaction reads each movement's audit head with its node locks, after the
    movement's lock: its events chain to it with no read of their own (the compare-and-set to
    SUBMITTING, which takes no lock, reads it)."""
    from movements.audit import movement_chain_breaks

    request, claim, sent = run_claimed_action(make_movement)

    head_reads = [
        sql
        for sql in sent
        if sql.startswith('SELECT "request_id", "chain_hash" FROM "movements_movementevent"')
    ]
    assert len(head_reads) == 1, head_reads  # the compare-and-set's
    assert claim.node.node_state == "COMPLETED"
    assert movement_chain_breaks(request.pk) == []


def test_a_result_write_numbers_its_callback_events_after_the_number_its_locks_read(
    make_movement,
):
    """The result transaction's node locks also read the number of each movement's newest
    callback event: its events are numbered after it, with no read of their own, and the
    movement's numbers stay 1, 2, 3, ... with no gap or repeat."""
    request, _, sent = run_claimed_action(make_movement)

    numbering_reads = [sql for sql in sent if 'MAX("sequence")' in sql]
    assert numbering_reads == []
    sequences = list(
        Event.objects.filter(request=request)
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )
    assert sequences == list(range(1, len(sequences) + 1))
    assert len(sequences) >= 4  # created, approved, executing, frontier advanced

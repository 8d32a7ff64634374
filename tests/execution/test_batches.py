"""The workers claim and write a batch of nodes at a time. What that must not change: each
request moves once, nodes of one request see each other's new state, a node is SUBMITTING only
while its own submit is in flight, a bad result costs only itself, and a worker that dies
mid-batch leaves its nodes to recovery, never to a second submit. Run on SQLite and
PostgreSQL."""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from movements.executors.base import Observation, ObservedStatus
from movements.models import MovementEvent, MovementRequestNode
from movements.services import execution, save_fields, set_node_state
from movements.services.execution import sweeps
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import StaleState
from tests.execution.conftest import assert_history_replays, ledger, node_path, settle
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


def locking_statements(queries) -> list[str]:
    return [
        q["sql"] for q in queries if "FOR UPDATE" in q["sql"] or "FOR NO KEY UPDATE" in q["sql"]
    ]


def completed(ctx):
    return Observation(status=ObservedStatus.COMPLETED, detail={"seen": ctx.node_key})


def test_one_claim_locks_a_batch_of_nodes_and_moves_each_request_once(make_movement):
    requests = [make_movement(approve=True) for _ in range(3)]

    with CaptureQueriesContext(connection) as queries:
        claims = execution.claim_ready_nodes(owner="w1", limit=10)

    assert sorted(c.request_id for c in claims) == sorted(r.pk for r in requests)
    if connection.vendor == "postgresql":
        assert len(locking_statements(queries.captured_queries)) == 1
    for request in requests:
        request.refresh_from_db()
        assert request.request_state == RequestState.EXECUTING
        assert node(request, "withdraw").node_state == NodeState.PREPARING
        moves = MovementEvent.objects.filter(
            request=request, node=None, kind=MovementEvent.Kind.TRANSITION, new_state="EXECUTING"
        )
        assert moves.count() == 1


def test_a_claim_batch_takes_no_more_than_its_limit(make_movement):
    for _ in range(3):
        make_movement(approve=True)

    assert len(execution.claim_ready_nodes(owner="w1", limit=2)) == 2
    assert len(execution.claim_ready_nodes(owner="w2", limit=2)) == 1
    assert execution.claim_ready_nodes(owner="w3", limit=2) == []


def test_parallel_branches_completed_in_one_batch_wake_their_join_once(make_movement, settings):
    settings.QTG_RESULT_WRITE_AT_ONCE_BELOW = 0  # a batch that writes its results together
    request = make_movement("split_join", approve=True)
    execution.dispatch_one(owner="w1")  # the withdraw: submitted, done at once
    assert node(request, "withdraw").node_state == NodeState.COMPLETED

    claims = execution.claim_ready_nodes(owner="w1", limit=10)
    assert sorted(c.context.node_key for c in claims) == ["chain_observe", "withdraw_observe"]
    for claim in claims:
        claim.executor.observe = completed

    with CaptureQueriesContext(connection) as queries:
        states = execution.run_observes(claims)

    assert set(states.values()) == {NodeState.COMPLETED}
    assert node_path(request, "deposit_observe") == ["BLOCKED", "READY"]
    request.refresh_from_db()
    assert request.current_frontier == ["deposit_observe"]
    assert request.request_state == RequestState.EXECUTING
    if connection.vendor == "postgresql":
        # One transaction: the request locked once, its nodes locked once.
        assert len(locking_statements(queries.captured_queries)) == 2
    assert_history_replays(request)


def test_a_node_is_submitting_only_while_its_own_submit_is_in_flight(make_movement, settings):
    settings.QTG_RESULT_WRITE_AT_ONCE_BELOW = 0  # a batch that holds its results
    requests = [make_movement(approve=True) for _ in range(3)]
    claims = execution.claim_ready_nodes(owner="w1", limit=10)
    seen = {}

    for claim in claims:
        original = claim.executor.submit

        def submit(ctx, original=original):
            seen[ctx.node_id] = dict(
                MovementRequestNode.objects.filter(pk__in=[c.node_id for c in claims]).values_list(
                    "pk", "node_state"
                )
            )
            return original(ctx)

        claim.executor.submit = submit

    execution.run_actions(claims)

    order = [claim.node_id for claim in claims]
    for position, node_id in enumerate(order):
        states = seen[node_id]
        assert states[node_id] == NodeState.SUBMITTING
        # The ones before it have been submitted (each movement has no other side effect:
        # their answers are held with the batch's); the ones after it have not been touched.
        assert all(states[other] == NodeState.SUBMITTING for other in order[:position])
        assert all(states[other] == NodeState.PREPARING for other in order[position + 1 :])
    for request in requests:
        assert node(request, "withdraw").node_state == NodeState.COMPLETED
        assert node(request, "withdraw").lease_owner == ""


def test_one_bad_result_in_a_batch_costs_only_itself(make_movement, settings):
    good, bad = make_movement(approve=True), make_movement(approve=True)
    settings.QTG_CLAIM_FIRST_ACTIONS = 0  # the withdraws in one claim
    execution.dispatch_ready_nodes(owner="w1", limit=2)  # both withdraws, nothing else yet
    claims = execution.claim_ready_nodes(owner="w1", limit=10)
    by_request = {claim.request_id: claim for claim in claims}
    by_request[good.pk].executor.observe = completed
    # A result the database cannot store (not JSON): applying it raises.
    by_request[bad.pk].executor.observe = lambda ctx: Observation(
        status=ObservedStatus.COMPLETED, detail={"unstorable": object()}
    )

    with pytest.raises(TypeError):
        execution.run_observes(claims)

    assert node(good, "withdraw_observe").node_state == NodeState.COMPLETED
    assert node(good, "deposit_observe").node_state == NodeState.READY
    bad_observer = node(bad, "withdraw_observe")
    assert bad_observer.node_state == NodeState.OBSERVING
    assert not MovementEvent.objects.filter(node=bad_observer, new_state="COMPLETED").exists()


def test_a_worker_that_dies_mid_batch_leaves_its_nodes_to_recovery_never_resubmitted(
    make_movement, settings
):
    settings.QTG_RESULT_WRITE_AT_ONCE_BELOW = 0  # a batch that holds its results
    first, second = make_movement(approve=True), make_movement(approve=True)
    claims = execution.claim_ready_nodes(owner="dead-worker", limit=10)
    by_request = {claim.request_id: claim for claim in claims}
    # The first withdrawal reaches the venue, its answer held with the batch's (its movement
    # has no other side effect); the worker is killed as it starts the second, before the
    # venue hears of it.
    second_claim = by_request[second.pk]
    second_claim.executor.submit = lambda ctx: (_ for _ in ()).throw(SystemExit("killed"))
    ordered = [by_request[first.pk], second_claim]

    with pytest.raises(SystemExit):
        execution.run_actions(ordered)

    assert node(first, "withdraw").node_state == NodeState.SUBMITTING
    assert node(second, "withdraw").node_state == NodeState.SUBMITTING
    assert len(ledger("withdraw")) == 1
    # The leases expire, and so does the validity of any request the dead worker had sent.
    validity = timedelta(seconds=settings.QTG_SANDBOX_REQUEST_VALIDITY_SECONDS)
    MovementRequestNode.objects.filter(pk__in=[c.node_id for c in claims]).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1),
        fenced_until=timezone.now() - validity - timedelta(seconds=1),
    )

    first, second = settle(first), settle(second)

    # The first's lost answer cost a lease's wait, never a person: recovery found the
    # withdrawal by its key, and it was not sent again.
    assert first.request_state == RequestState.COMPLETED
    assert node_path(first, "withdraw")[-3:-1] == ["SUBMITTING", "UNKNOWN"]
    assert node(first, "withdraw").attempt == 1
    # The second never reached the exchange (proven once its request's validity passed): a
    # new attempt, with a new key, took its place; the lost one was never submitted again.
    assert second.request_state == RequestState.COMPLETED
    lost = MovementRequestNode.objects.get(request=second, node_key="withdraw", attempt=1)
    assert lost.node_state == NodeState.FAILED and not lost.is_current
    lost_path = lost.events.filter(kind=MovementEvent.Kind.TRANSITION).order_by("pk")
    assert [e.new_state for e in lost_path][-3:] == ["SUBMITTING", "UNKNOWN", "FAILED"]
    assert node(second, "withdraw").attempt == 2
    keys = [entry.detail["client_key"] for entry in ledger("withdraw")]
    assert lost.idempotency_key not in keys
    assert len(keys) == 2 == len(set(keys))
    assert_history_replays(first)
    assert_history_replays(second)


def test_a_compare_and_set_transition_refuses_a_lease_that_is_not_ours(make_movement):
    request = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    withdraw = claim.node
    MovementRequestNode.objects.filter(pk=withdraw.pk).update(lease_owner="w2")

    with pytest.raises(StaleState):
        set_node_state(
            node=withdraw,
            new_state=NodeState.SUBMITTING,
            actor=Actor.system("w1"),
            only_if={"lease_owner": "w1"},
        )

    assert node(request, "withdraw").node_state == NodeState.PREPARING
    assert not MovementEvent.objects.filter(node_id=withdraw.pk, new_state="SUBMITTING").exists()


def test_bookkeeping_saves_never_carry_a_state(make_movement):
    request = make_movement(approve=True)
    withdraw = node(request, "withdraw")

    with pytest.raises(ValueError, match="state changes go through"):
        save_fields(withdraw, ["node_state"])
    withdraw.lease_owner = "someone"
    save_fields(withdraw, ["lease_owner"])

    assert node(request, "withdraw").lease_owner == "someone"


def test_nodes_waiting_their_turn_in_a_long_batch_keep_their_leases(make_movement, settings):
    settings.QTG_LEASE_SECONDS = 1
    first, second = make_movement(approve=True), make_movement(approve=True)
    claims = execution.claim_ready_nodes(owner="w1", limit=10)
    by_request = {claim.request_id: claim for claim in claims}
    waiting = node(second, "withdraw")
    original_prepare = by_request[first.pk].executor.prepare

    def slow_prepare(ctx):
        time.sleep(0.6)  # past half the lease
        return original_prepare(ctx)

    by_request[first.pk].executor.prepare = slow_prepare
    renewed = {}
    original_second = by_request[second.pk].executor.prepare

    def second_prepare(ctx):
        renewed["lease"] = node(second, "withdraw").lease_expires_at
        return original_second(ctx)

    by_request[second.pk].executor.prepare = second_prepare

    execution.run_actions([by_request[first.pk], by_request[second.pk]])

    assert renewed["lease"] > waiting.lease_expires_at
    assert execution.reap_expired_leases() == 0
    assert node(first, "withdraw").node_state == NodeState.COMPLETED
    assert node(second, "withdraw").node_state == NodeState.COMPLETED


def test_a_slow_venue_does_not_hold_back_the_results_already_known(make_movement, settings):
    settings.QTG_RESULT_WRITE_SECONDS = 0.2
    first, second = make_movement(approve=True), make_movement(approve=True)
    settings.QTG_CLAIM_FIRST_ACTIONS = 0  # the withdraws in one claim
    execution.dispatch_ready_nodes(owner="w1", limit=2)  # both withdraws
    claims = execution.claim_ready_nodes(owner="w1", limit=10)
    by_request = {claim.request_id: claim for claim in claims}
    seen = {}

    def slow(ctx):
        time.sleep(0.3)
        return completed(ctx)

    def look_then_complete(ctx):
        seen["first"] = node(first, "withdraw_observe").node_state
        return completed(ctx)

    by_request[first.pk].executor.observe = slow
    by_request[second.pk].executor.observe = look_then_complete

    execution.run_observes([by_request[first.pk], by_request[second.pk]])

    # The first answer took longer than the write interval: it was written before the
    # second venue call, not held until the batch was done.
    assert seen["first"] == NodeState.COMPLETED
    assert node(second, "withdraw_observe").node_state == NodeState.COMPLETED


def test_a_small_batch_writes_each_answer_as_it_comes(make_movement, settings):
    settings.QTG_RESULT_WRITE_AT_ONCE_BELOW = 4
    first, second = make_movement(approve=True), make_movement(approve=True)
    execution.dispatch_ready_nodes(owner="w1", limit=2)
    claims = execution.claim_ready_nodes(owner="w1", limit=10)
    by_request = {claim.request_id: claim for claim in claims}
    seen = {}

    def look_then_complete(ctx):
        seen["first"] = node(first, "withdraw_observe").node_state
        return completed(ctx)

    by_request[first.pk].executor.observe = completed
    by_request[second.pk].executor.observe = look_then_complete

    execution.run_observes([by_request[first.pk], by_request[second.pk]])

    assert seen["first"] == NodeState.COMPLETED  # written before the next venue call


def test_fast_answers_of_a_large_batch_are_written_together(make_movement, settings):
    settings.QTG_RESULT_WRITE_AT_ONCE_BELOW = 2
    settings.QTG_CLAIM_BATCH_MIN = 10  # the three withdraws in one claim
    settings.QTG_CLAIM_FIRST_ACTIONS = 0
    requests = [make_movement(approve=True) for _ in range(3)]
    execution.dispatch_ready_nodes(owner="w1", limit=3)
    claims = execution.claim_ready_nodes(owner="w1", limit=10)
    for claim in claims:
        claim.executor.observe = completed

    with CaptureQueriesContext(connection) as queries:
        execution.run_observes(claims)

    for request in requests:
        assert node(request, "withdraw_observe").node_state == NodeState.COMPLETED
    if connection.vendor == "postgresql":
        assert len(locking_statements(queries.captured_queries)) == 2  # one transaction


@pytest.mark.parametrize(("write_seconds", "written_by_third_call"), [(60, 0), (0, 2)])
def test_a_sweeps_answers_are_held_for_one_write_at_most_result_write_seconds(
    make_movement, settings, monkeypatch, write_seconds, written_by_third_call
):
    # Three observe nodes due, claimed together by a sweep whose queue is short: their
    # answers are held for one write, but never longer than QTG_RESULT_WRITE_SECONDS.
    from movements.executors import get_executor

    settings.QTG_RESULT_WRITE_AT_ONCE_BELOW = 2
    settings.QTG_RESULT_WRITE_SECONDS = write_seconds
    settings.QTG_CLAIM_BATCH_MIN = 10
    settings.QTG_CLAIM_FIRST_ACTIONS = 0
    requests = [make_movement(approve=True) for _ in range(3)]
    execution.dispatch_ready_nodes(owner="w1", limit=3)
    seen = []
    executor = get_executor(node(requests[0], "withdraw_observe").executor)

    def observe(self, ctx):
        states = [node(r, "withdraw_observe").node_state for r in requests]
        seen.append(states.count(NodeState.COMPLETED))
        return completed(ctx)

    monkeypatch.setattr(type(executor), "observe", observe)

    assert execution.dispatch_ready_nodes(owner="w1", limit=3) == 3

    assert seen[2] == written_by_third_call
    assert all(node(r, "withdraw_observe").node_state == NodeState.COMPLETED for r in requests)


def test_a_claimed_action_node_goes_before_the_observe_nodes_of_its_claim(
    make_movement, settings, monkeypatch
):
    # An observe node only polls; an action node was claimed PREPARING and waits to move money.
    from movements.executors import get_executor

    settings.QTG_CLAIM_BATCH_MIN = 10
    watched = make_movement(approve=True)
    execution.dispatch_ready_nodes(owner="w1", limit=1)  # its withdraw: observe node READY
    moving = make_movement(approve=True)
    seen = []
    executor = get_executor(node(watched, "withdraw_observe").executor)
    original = type(executor).observe

    def observe(self, ctx):
        seen.append(node(moving, "withdraw").node_state)
        return original(self, ctx)

    monkeypatch.setattr(type(executor), "observe", observe)

    execution.dispatch_ready_nodes(owner="w1", limit=10)  # one claim: the observe, the withdraw

    assert seen and seen[0] not in (NodeState.READY, NodeState.PREPARING), seen


def test_the_reaper_is_recorded_with_the_worker_process_that_ran_it(make_movement):
    import os
    import socket

    request = make_movement(approve=True)
    [claim] = execution.claim_ready_nodes(owner="dead-worker", limit=1)
    MovementRequestNode.objects.filter(pk=claim.node_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert execution.reap_expired_leases() == 1

    reaped = MovementEvent.objects.filter(request=request).order_by("id").last()
    assert reaped.actor_id == f"lease-reaper@worker:{socket.gethostname()}:{os.getpid()}"


def test_a_submits_answer_is_written_at_once_where_its_movement_has_another_side_effect(
    make_movement, settings
):
    # The batch holds its other results for one write; a submit's answer is not held when
    # another node of its movement has a side effect: a worker that died holding it would
    # leave its node UNKNOWN beside a completed side effect, a movement for a person.
    settings.QTG_RESULT_WRITE_SECONDS = 3600
    settings.QTG_RESULT_WRITE_AT_ONCE_BELOW = 0
    for _ in range(2):
        # withdraw_a and withdraw_b both READY
        make_movement(
            "split_withdraw", approve=True, params={"second_source": "sandbox-exchange-c"}
        )
    claims = execution.claim_ready_nodes(owner="w", limit=3)
    assert [claim.shares_side_effects for claim in claims] == [True, True, True]
    ids = [claim.node_id for claim in claims]
    seen = []
    for claim in claims[1:]:
        executor = type(claim.executor)()
        prepare = executor.prepare

        def traced_prepare(ctx, prepare=prepare):
            states = MovementRequestNode.objects.filter(pk__in=ids).values_list(
                "node_state", flat=True
            )
            seen.append(sorted(states))
            return prepare(ctx)

        executor.prepare = traced_prepare
        claim.executor = executor

    execution.run_actions(claims)

    # When the second and the third are prepared, those before them are past their submit
    # with their answers written (the third is of the other movement).
    assert seen == [
        [NodeState.COMPLETED, NodeState.PREPARING, NodeState.PREPARING],
        [NodeState.COMPLETED, NodeState.COMPLETED, NodeState.PREPARING],
    ]


def test_a_movement_with_one_side_effect_has_its_submit_answers_written_with_the_batch(
    make_movement, settings
):
    # Its answer lost with a worker costs a lease's wait (recovery finds it by its key), never
    # a person: the batch writes the answers of such nodes together, one transaction.
    settings.QTG_RESULT_WRITE_SECONDS = 3600
    settings.QTG_RESULT_WRITE_AT_ONCE_BELOW = 0
    requests = [make_movement(approve=True) for _ in range(3)]
    claims = execution.claim_ready_nodes(owner="w", limit=3)
    assert [claim.shares_side_effects for claim in claims] == [False, False, False]

    with CaptureQueriesContext(connection) as queries:
        execution.run_actions(claims)

    for request in requests:
        assert node(request, "withdraw").node_state == NodeState.COMPLETED
    if connection.vendor == "postgresql":
        # One result transaction: the movements locked once, their nodes locked once.
        assert len(locking_statements(queries.captured_queries)) == 2


def test_a_tick_fans_out_sweeps_only_for_what_the_first_claim_leaves(
    make_movement, settings, monkeypatch
):
    # Each sweep starts with a claim of QTG_CLAIM_BATCH_MIN nodes: a queue that one claim takes
    # whole needs no other worker, and a sweep sent for it found nothing (a task, a reaping and
    # an empty claim on another worker at every tick).
    from movements import tasks

    settings.QTG_CLAIM_BATCH_MIN, settings.QTG_CLAIM_BATCH = 2, 50
    settings.QTG_DISPATCH_BATCH, settings.QTG_SWEEP_FANOUT = 50, 4
    settings.QTG_CLAIM_FIRST_ACTIONS = 0  # first claims of any number of action nodes
    sent = []
    monkeypatch.setattr(tasks.dispatch_ready, "apply_async", lambda **kw: sent.append(kw))

    def fanned_out_with(due: int) -> int:
        while execution.due_counts(phase="dispatch")[0] < due:
            make_movement(approve=True)
        sent.clear()
        tasks._fan_out(tasks.dispatch_ready, "dispatch", True)
        assert all(kw == {"kwargs": {"fanout": False}} for kw in sent)
        return len(sent)

    assert fanned_out_with(2) == 0
    assert fanned_out_with(3) == 1
    assert fanned_out_with(5) == 2
    assert fanned_out_with(9) == 3  # at most QTG_SWEEP_FANOUT - 1
    sent.clear()
    tasks._fan_out(tasks.dispatch_ready, "dispatch", False)  # a fanned-out sweep sends none
    assert sent == []
    # One node per sweep (a sweep's limit below its first claim): one sweep per node due.
    settings.QTG_DISPATCH_BATCH = 1
    assert tasks.extra_sweeps(1) == 0 and tasks.extra_sweeps(3) == 2


def test_a_tick_fans_out_a_sweep_for_each_action_node_its_first_claim_leaves(
    make_movement, settings, monkeypatch
):
    # A first claim takes one action node: each other one due gets a sweep of its own, run at
    # once by an idle worker instead of waiting behind the first one's venue calls.
    from movements import tasks

    settings.QTG_CLAIM_BATCH_MIN, settings.QTG_SWEEP_FANOUT = 8, 4
    settings.QTG_CLAIM_FIRST_ACTIONS = 1
    sent = []
    monkeypatch.setattr(tasks.dispatch_ready, "apply_async", lambda **kw: sent.append(kw))
    monkeypatch.setattr(tasks.observe_submitted, "apply_async", lambda **kw: sent.append(kw))

    def fanned_out(task, phase: str) -> int:
        sent.clear()
        tasks._fan_out(task, phase, True)
        return len(sent)

    make_movement(approve=True)
    assert execution.due_counts(phase="dispatch") == (1, 1)
    assert fanned_out(tasks.dispatch_ready, "dispatch") == 0
    make_movement(approve=True)
    make_movement(approve=True)
    assert execution.due_counts(phase="dispatch") == (3, 3)
    assert fanned_out(tasks.dispatch_ready, "dispatch") == 2
    assert tasks.extra_sweeps(9, 9) == 3  # at most QTG_SWEEP_FANOUT - 1
    assert tasks.extra_sweeps(6, 0) == 0  # observe nodes only: one first claim takes them
    settings.QTG_CLAIM_FIRST_ACTIONS = 2
    assert tasks.extra_sweeps(3, 3) == 1


def test_a_sweeps_first_claim_takes_one_action_node_and_its_next_claim_the_others(
    make_movement, settings, monkeypatch
):
    # With no other worker to take them, the sweep's own next claim does (no action node is
    # left for the next tick).
    settings.QTG_CLAIM_BATCH_MIN, settings.QTG_CLAIM_FIRST_ACTIONS = 8, 1
    requests = [make_movement(approve=True) for _ in range(3)]
    original = sweeps.claim_ready_nodes
    sizes: list[tuple[list[str], int | None]] = []

    def recording(**kwargs):
        claims = original(**kwargs)
        sizes.append(([claim.kind for claim in claims], kwargs.get("actions")))
        return claims

    monkeypatch.setattr(sweeps, "claim_ready_nodes", recording)
    execution.dispatch_ready_nodes(owner="w1", limit=50)

    assert sizes[0] == (["ACTION"], 1)
    assert sizes[1][0].count("ACTION") == 2 and sizes[1][1] is None
    for request in requests:
        assert node(request, "withdraw").node_state not in (NodeState.READY, NodeState.PREPARING)


def test_a_claim_of_one_action_node_leaves_the_others_unlocked_for_another_worker(
    make_movement,
):
    requests = [make_movement(approve=True) for _ in range(3)]
    first = execution.claim_ready_nodes(owner="w1", limit=8, actions=1)
    assert [claim.kind for claim in first] == ["ACTION"]
    rest = execution.claim_ready_nodes(owner="w2", limit=8)
    assert len(rest) == 2
    assert {c.request_id for c in first + rest} == {r.pk for r in requests}

"""The fence between a lease and a side effect, the budget of venue answers, and batches that
flow: what a worker proves before a request leaves, what it counts, and in which order it
works a batch. Run on SQLite and PostgreSQL."""

import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from movements.executors.base import (
    DeterministicError,
    LeaseLost,
    Prepared,
    TransientError,
    VenueWait,
)
from movements.models import (
    AttentionReason,
    MovementAttention,
    MovementEvent,
    MovementRequestNode,
)
from movements.services import execution
from movements.services.execution import leases
from movements.services.execution.leases import LeaseKeeper
from movements.services.execution.results import Result, apply_results
from movements.services.execution.sweeps import claim_sizes
from movements.states import NodeState
from tests.execution.conftest import ledger, settle
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


def _expire(claim) -> None:
    MovementRequestNode.objects.filter(pk=claim.node_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )


def _pause_past_the_lease(monkeypatch, settings) -> None:
    """The monotonic clock a paused process finds when it runs again: a lease later."""
    real = time.monotonic
    later = SimpleNamespace(monotonic=lambda: real() + settings.QTG_LEASE_SECONDS)
    monkeypatch.setattr(leases, "time", later)


def test_a_worker_whose_lease_was_reaped_before_its_request_left_sends_nothing(
    make_movement, monkeypatch, settings
):
    movement = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="paused-worker")
    sent = []
    real_submit = claim.executor.submit

    def paused_then_submit(ctx):
        # The worker is paused here, past its lease; meanwhile another worker reaps the node.
        _pause_past_the_lease(monkeypatch, settings)
        _expire(claim)
        execution.reap_expired_leases()
        sent.append(True)
        return real_submit(ctx)

    claim.executor.submit = paused_then_submit

    execution.run_actions([claim])

    withdraw = node(movement, "withdraw")
    assert sent == [True]
    assert withdraw.node_state == NodeState.UNKNOWN
    assert ledger("withdraw") == []  # the fence refused: nothing reached the exchange
    late = MovementEvent.objects.get(node=withdraw, detail__late_result="submit")
    assert "LeaseLost" in late.detail["outcome"]["error"]


def test_a_fence_right_after_the_submitting_compare_and_set_is_proven_by_it(make_movement):
    # The compare-and-set to SUBMITTING proved the lease for the submit's timeout (and a
    # second more, on the node): an executor's fence at once after it needs no statement.
    movement = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    fences = []
    real_submit = claim.executor.submit

    def counted_submit(ctx):
        # The sandbox's submit fences right before its withdrawal leaves.
        with CaptureQueriesContext(connection) as queries:
            submitted = real_submit(ctx)
        fences.append(sum("fenced_until" in q["sql"] for q in queries.captured_queries))
        return submitted

    claim.executor.submit = counted_submit

    execution.run_actions([claim])

    withdraw = node(movement, "withdraw")
    assert fences == [0]
    timeout = timedelta(seconds=claim.executor.call_timeout(claim.context))
    assert withdraw.fenced_until >= withdraw.fenced_at + timeout + timedelta(seconds=1)
    assert len(ledger("withdraw")) == 1


def test_a_fence_after_a_pause_proves_the_lease_again(make_movement, monkeypatch, settings):
    make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    fences = []
    real_submit = claim.executor.submit

    def paused_submit(ctx):
        _pause_past_the_lease(monkeypatch, settings)
        with CaptureQueriesContext(connection) as queries:
            ctx.fence(claim.executor.call_timeout(ctx))
        fences.append(any("fenced_until" in q["sql"] for q in queries.captured_queries))
        return real_submit(ctx)

    claim.executor.submit = paused_submit

    execution.run_actions([claim])

    # The pause's fence and the submit's own: each a statement (the proof is used once).
    assert fences == [True]
    assert len(ledger("withdraw")) == 1


def test_the_fence_refuses_a_stale_epoch_even_for_the_same_owner(make_movement):
    make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    MovementRequestNode.objects.filter(pk=claim.node_id).update(
        lease_epoch=claim.epoch + 1  # another claim since, under the same owner name
    )

    with pytest.raises(LeaseLost):
        claim.context.fence(5)


def test_the_fence_records_the_call_and_makes_the_lease_outlast_it(make_movement):
    make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    before = timezone.now()
    ran = []

    deadline = claim.context.fence(120, then=lambda: ran.append(True))

    row = MovementRequestNode.objects.get(pk=claim.node_id)
    assert ran == [True]
    assert row.fenced_until == deadline
    assert deadline >= before + timedelta(seconds=120)
    assert row.lease_expires_at > deadline


def test_what_the_fence_runs_is_rolled_back_with_it(make_movement):
    make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")

    def journal_write_that_fails():
        MovementRequestNode.objects.filter(pk=claim.node_id).update(external_ref="must-vanish")
        raise RuntimeError("journal row moved meanwhile")

    with pytest.raises(RuntimeError):
        claim.context.fence(5, then=journal_write_that_fails)

    row = MovementRequestNode.objects.get(pk=claim.node_id)
    assert row.external_ref == "" and row.fenced_until is None


def test_a_result_under_an_old_epoch_is_kept_as_evidence_and_never_applied(make_movement):
    movement = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    _expire(claim)
    execution.reap_expired_leases()  # back to READY
    again = execution.claim_ready_node(owner="w1")  # the same owner name, a new epoch
    assert again.epoch == claim.epoch + 1

    apply_results([Result(claim, "prepare", error=TransientError("x"))])

    withdraw = node(movement, "withdraw")
    assert withdraw.node_state == NodeState.PREPARING
    assert withdraw.venue_errors == 0
    assert MovementEvent.objects.filter(node=withdraw, detail__late_result="prepare").exists()


def test_claims_lost_to_dead_workers_never_fail_a_node(make_movement, settings):
    settings.QTG_MAX_DISPATCHES = 3
    movement = make_movement(approve=True)
    for _ in range(6):  # six workers die while preparing it
        claim = execution.claim_ready_node(owner="dying", as_of=timezone.now() + timedelta(days=1))
        _expire(claim)
        execution.reap_expired_leases()

    movement = settle(movement)

    withdraw = node(movement, "withdraw")
    assert movement.request_state == "COMPLETED"
    assert withdraw.dispatch_count == 7 and withdraw.venue_errors == 0


def test_a_node_its_workers_keep_losing_asks_a_person_once_past_the_long_bound(
    make_movement, settings
):
    settings.QTG_WAIT_ATTENTION_SECONDS = 3600
    movement = make_movement(approve=True)
    now = timezone.now()
    raised = []
    for minutes in (90, 60, 29, 1):  # its workers died while preparing it, for over an hour
        claim = execution.claim_ready_node(owner="dying", as_of=now + timedelta(days=1))
        expired = now - timedelta(minutes=minutes)
        MovementRequestNode.objects.filter(pk=claim.node_id).update(lease_expires_at=expired)
        execution.reap_expired_leases()
        raised.append(MovementAttention.objects.filter(node_id=claim.node_id).count())

    assert raised == [0, 0, 1, 1]  # past the bound, and once
    withdraw = node(movement, "withdraw")
    assert withdraw.node_state == NodeState.READY  # never FAILED for it, nothing was sent
    attention = MovementAttention.objects.get(node=withdraw, resolved_at__isnull=True)
    assert attention.reason == AttentionReason.STUCK
    assert "workers have lost this node before its submit since" in attention.message
    assert "nothing was sent" in attention.message

    movement = settle(movement)  # a worker that lives submits it; the count starts afresh

    assert movement.request_state == "COMPLETED"
    assert node(movement, "withdraw").result.get("lost_since") is None


@pytest.mark.parametrize(
    "wait", [VenueWait("exchange maintenance"), TransientError("429", retry_after=0)]
)
def test_waits_the_venue_asked_for_never_fail_a_node(make_movement, settings, wait):
    settings.QTG_MAX_DISPATCHES = 2
    movement = make_movement(approve=True)
    for _ in range(5):
        claim = execution.claim_ready_node(owner="w", as_of=timezone.now() + timedelta(days=1))
        claim.executor.prepare = lambda ctx, wait=wait: (_ for _ in ()).throw(wait)
        execution.run_actions([claim])

    withdraw = node(movement, "withdraw")
    assert withdraw.node_state == NodeState.READY
    assert withdraw.venue_errors == 0
    assert settle(movement).request_state == "COMPLETED"


def test_venue_errors_spend_the_budget_and_the_reason_says_so(make_movement, settings):
    settings.QTG_MAX_DISPATCHES = 2
    movement = make_movement(approve=True)
    for _ in range(2):
        claim = execution.claim_ready_node(owner="w", as_of=timezone.now() + timedelta(days=1))
        claim.executor.prepare = lambda ctx: (_ for _ in ()).throw(TransientError("502"))
        execution.run_actions([claim])

    movement.refresh_from_db()
    withdraw = node(movement, "withdraw")
    assert withdraw.node_state == NodeState.FAILED and withdraw.venue_errors == 2
    assert movement.failure_reason == (
        "withdraw failed: gave up after 2 venue errors at prepare; the last: TransientError: 502"
    )


def test_a_batch_takes_each_node_to_its_submit_before_preparing_the_next(make_movement):
    for _ in range(3):
        make_movement(approve=True)
    claims = execution.claim_ready_nodes(owner="w", limit=10)
    calls = []
    for claim in claims:
        executor = claim.executor
        prepare, submit = executor.prepare, executor.submit

        def traced_prepare(ctx, prepare=prepare):
            calls.append(("prepare", ctx.request_id))
            return prepare(ctx)

        def traced_submit(ctx, submit=submit):
            calls.append(("submit", ctx.request_id))
            return submit(ctx)

        # Each claim has its own executor object to trace (the registry's is shared).
        claim.executor = type(executor)()
        claim.executor.prepare, claim.executor.submit = traced_prepare, traced_submit

    execution.run_actions(claims)

    ids = [str(claim.request_id) for claim in claims]
    assert calls == [(step, pk) for pk in ids for step in ("prepare", "submit")]


def test_a_batch_writes_a_result_before_the_next_node_of_its_movement_may_submit(make_movement):
    movement = make_movement(
        "split_withdraw", approve=True, params={"second_source": "sandbox-exchange-c"}
    )
    claims = execution.claim_ready_nodes(owner="w", limit=10)
    first = claims[0]
    first.executor = type(first.executor)()
    first.executor.prepare = lambda ctx: Prepared()
    first.executor.submit = lambda ctx: (_ for _ in ()).throw(DeterministicError("refused"))

    execution.run_actions(claims)

    states = dict(movement.nodes.filter(is_current=True).values_list("node_key", "node_state"))
    assert states[first.node.node_key] == NodeState.FAILED
    other = next(
        key for key in states if key.startswith("withdraw_") and key != first.node.node_key
    )
    assert states[other] == NodeState.READY  # held back: never submitted after a sibling FAILED


def test_claim_sizes_start_small_and_grow_only_while_claims_come_back_full():
    sizes = claim_sizes(4, 50)

    first = next(sizes)
    grown = sizes.send(4)
    again = sizes.send(8)
    partial = sizes.send(3)
    capped = [sizes.send(50) for _ in range(4)][-1]

    assert (first, grown, again, partial, capped) == (4, 8, 16, 16, 50)


def test_every_sweep_reaps_a_dead_workers_leases_before_it_claims(make_movement):
    movement = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="dead")
    _expire(claim)

    execution.dispatch_ready_nodes(owner="live")  # no separate reaper ran

    withdraw = node(movement, "withdraw")
    assert withdraw.node_state != NodeState.PREPARING
    assert MovementEvent.objects.filter(node=withdraw, detail__reason="lease expired").exists()


def _lose_the_submit(movement, owner="dead"):
    """A worker takes the withdrawal to SUBMITTING and dies before its request leaves; its
    lease and the request's validity run out."""
    claim = execution.claim_ready_node(owner=owner, as_of=timezone.now() + timedelta(days=1))
    claim.executor = type(claim.executor)()
    claim.executor.submit = lambda ctx: (_ for _ in ()).throw(SystemExit("killed"))
    with pytest.raises(SystemExit):
        execution.run_actions([claim])
    MovementRequestNode.objects.filter(pk=claim.node_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1),
        fenced_until=timezone.now() - timedelta(seconds=1),
    )
    execution.reap_expired_leases()
    return claim


def test_a_submit_a_dead_worker_never_sent_is_retried_as_a_new_attempt(make_movement):
    movement = make_movement(approve=True)
    lost = _lose_the_submit(movement)

    movement = settle(movement)

    assert movement.request_state == "COMPLETED"
    first = MovementRequestNode.objects.get(pk=lost.node_id)
    assert first.node_state == NodeState.FAILED and not first.is_current
    assert first.last_error.startswith("recovery: the venue has no withdrawal with this key")
    assert node(movement, "withdraw").attempt == 2
    [paid] = ledger("withdraw")
    assert paid.detail["client_key"] == node(movement, "withdraw").idempotency_key


def test_a_request_the_venue_lost_is_not_retried_by_itself(make_movement):
    # The exchange timed out and lost it: that is the venue's answer, for a person to judge.
    movement = settle(
        make_movement(approve=True, params={"sandbox": {"withdraw": "submit_timeout_lost"}})
    )

    assert movement.request_state == "FAILED"
    assert node(movement, "withdraw").attempt == 1


def test_the_workers_retry_a_lost_submit_by_themselves_at_most_twice(make_movement):
    movement = make_movement(approve=True)
    for _ in range(3):
        _lose_the_submit(movement)
        execution.recover_unknown_nodes(owner="r")
        execution.recover_unknown_nodes(owner="r")

    movement.refresh_from_db()
    attempts = MovementRequestNode.objects.filter(request=movement, node_key="withdraw")
    assert attempts.count() == 3
    assert movement.request_state == "FAILED"
    assert ledger("withdraw") == []


def test_a_renewal_never_takes_back_the_time_the_fence_gave_its_call(make_movement, settings):
    # The call may take 600 s; the heartbeat renews every third of a 60 s lease meanwhile.
    settings.QTG_LEASE_SECONDS = 60
    make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    deadline = claim.context.fence(600)

    LeaseKeeper([claim]).renew()

    row = MovementRequestNode.objects.get(pk=claim.node_id)
    assert row.lease_expires_at > deadline


def test_a_renewal_without_a_call_in_flight_gives_a_plain_lease(make_movement, settings):
    settings.QTG_LEASE_SECONDS = 60
    make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")
    before = timezone.now()

    LeaseKeeper([claim]).renew()

    row = MovementRequestNode.objects.get(pk=claim.node_id)
    assert before + timedelta(seconds=59) < row.lease_expires_at < before + timedelta(seconds=70)


def test_the_reaper_records_how_late_it_came_to_a_lease(make_movement):
    movement = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="dead")
    MovementRequestNode.objects.filter(pk=claim.node_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=30)
    )

    execution.reap_expired_leases()

    reaped = MovementEvent.objects.get(
        node=node(movement, "withdraw"), detail__reason="lease expired"
    )
    assert 30 <= reaped.detail["reap_lag_seconds"] < 60


@pytest.mark.django_db(transaction=True)
def test_a_movement_another_process_holds_never_holds_up_the_reaper(make_movement, settings):
    """A worker paused inside a transaction holds its movement's row: the reaper skips that
    node (to look again next round) and moves every other one, never waiting for the lock."""
    if not settings.DB_IS_POSTGRES:
        pytest.skip("row locks are PostgreSQL's")
    import threading

    from django.db import connection, transaction

    from movements.models import MovementRequest

    held, free = make_movement(approve=True), make_movement(approve=True)
    claims = execution.claim_ready_nodes(owner="dead", limit=2)
    for claim in claims:
        _expire(claim)
    locked, release = threading.Event(), threading.Event()

    def paused_inside_a_transaction():
        try:
            with transaction.atomic():
                MovementRequest.objects.select_for_update().get(pk=held.pk)
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=paused_inside_a_transaction)
    holder.start()
    try:
        assert locked.wait(10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")  # a waiting reaper fails, never hangs
        try:
            moved = execution.reap_expired_leases()
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
        assert moved == 1
        assert node(free, "withdraw").node_state == NodeState.READY
        assert node(held, "withdraw").node_state == NodeState.PREPARING
    finally:
        release.set()
        holder.join()

    assert execution.reap_expired_leases() == 1  # the next round, once the row is free
    assert node(held, "withdraw").node_state == NodeState.READY

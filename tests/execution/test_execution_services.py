"""The worker services in-process (no Celery): node transitions, the error taxonomy,
exactly-once side effects, recovery, leases and reorgs. Run on SQLite and PostgreSQL."""

from datetime import timedelta

import pytest
from django.utils import timezone

from movements.executors.base import DeterministicError, TransientError
from movements.models import MovementEvent, MovementRequestNode
from movements.services import execution, manual_gate_resume
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from tests.execution.conftest import assert_history_replays, ledger, node_path, settle
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


def test_the_cex_lane_runs_every_node_along_the_spec_path_to_completed(make_movement):
    request = make_movement(approve=True)

    request = settle(request)

    assert request.request_state == RequestState.COMPLETED
    assert node_path(request, "withdraw") == [
        "BLOCKED",
        "READY",
        "PREPARING",
        "SUBMITTING",
        "COMPLETED",
    ]
    assert node_path(request, "withdraw_observe") == ["BLOCKED", "READY", "OBSERVING", "COMPLETED"]
    assert node_path(request, "deposit_observe") == ["BLOCKED", "READY", "OBSERVING", "COMPLETED"]
    assert len(ledger("withdraw")) == 1
    assert len(ledger("chain_transfer")) == 1
    assert len(ledger("deposit_credit")) == 1
    assert request.current_frontier == []
    assert_history_replays(request)


def test_the_first_dispatch_moves_the_request_from_approved_to_executing(make_movement):
    request = make_movement(approve=True)
    assert request.request_state == RequestState.APPROVED

    claim = execution.claim_ready_node(owner="w1")

    request.refresh_from_db()
    assert claim.context.node_key == "withdraw"
    assert request.request_state == RequestState.EXECUTING
    withdraw = node(request, "withdraw")
    assert withdraw.node_state == NodeState.PREPARING
    assert withdraw.lease_owner == "w1" and withdraw.lease_expires_at > timezone.now()


def test_the_idempotency_key_is_persisted_at_claim_before_anything_is_submitted(make_movement):
    request = make_movement(approve=True)

    claim = execution.claim_ready_node(owner="w1")

    withdraw = node(request, "withdraw")
    assert withdraw.idempotency_key == execution.attempt_idempotency_key(withdraw)
    assert claim.context.idempotency_key == withdraw.idempotency_key
    assert ledger("withdraw") == []


def test_a_withdraw_the_venue_rejects_ends_failed_without_a_side_effect(make_movement):
    request = make_movement(params={"sandbox": {"withdraw": "fail"}}, approve=True)

    request = settle(request)

    assert request.request_state == RequestState.FAILED
    assert node(request, "withdraw").node_state == NodeState.FAILED
    assert node(request, "withdraw_observe").node_state == NodeState.BLOCKED
    assert ledger("withdraw") == []
    assert_history_replays(request)


def test_a_failed_deposit_after_a_completed_withdraw_needs_manual_intervention(make_movement):
    request = make_movement(params={"sandbox": {"deposit_observe": "observe_fail"}}, approve=True)

    request = settle(request)

    assert request.request_state == RequestState.MANUAL_INTERVENTION
    assert node(request, "withdraw").node_state == NodeState.COMPLETED
    assert node(request, "deposit_observe").node_state == NodeState.FAILED


def test_a_manual_gate_is_never_dispatched_and_waits_for_an_operator(make_movement, operator):
    request = make_movement("cex_to_cex_gated", approve=True)

    request = settle(request)
    assert request.request_state == RequestState.WAITING_MANUAL_ACTION
    assert node(request, "manual_release").node_state == NodeState.READY
    assert execution.dispatch_ready_nodes(owner="w1") == 0

    manual_gate_resume(request=request, actor=Actor.for_user(operator))
    request = settle(request)

    assert request.request_state == RequestState.COMPLETED
    assert_history_replays(request)


def test_a_submit_timeout_that_landed_is_recovered_to_completed_with_one_side_effect(
    make_movement,
):
    request = make_movement(params={"sandbox": {"withdraw": "submit_timeout_landed"}}, approve=True)

    request = settle(request)

    assert request.request_state == RequestState.COMPLETED
    assert node_path(request, "withdraw") == [
        "BLOCKED",
        "READY",
        "PREPARING",
        "SUBMITTING",
        "UNKNOWN",
        "COMPLETED",
    ]
    assert len(ledger("withdraw")) == 1
    assert node(request, "withdraw").dispatch_count == 1
    recovered = MovementEvent.objects.get(
        node__node_key="withdraw", request=request, new_state="COMPLETED"
    )
    assert recovered.detail["resolution"] == "recovery"
    assert_history_replays(request)


def test_a_submit_timeout_that_was_lost_is_recovered_to_failed(make_movement):
    request = make_movement(params={"sandbox": {"withdraw": "submit_timeout_lost"}}, approve=True)

    request = settle(request)

    assert request.request_state == RequestState.FAILED
    assert node_path(request, "withdraw")[-2:] == ["UNKNOWN", "FAILED"]
    assert ledger("withdraw") == []


def test_a_delayed_withdrawal_keeps_its_observer_waiting_until_the_delay_passes(make_movement):
    request = make_movement(params={"sandbox": {"withdraw_observe": "delay:0.5"}}, approve=True)
    execution.dispatch_ready_nodes(owner="w1")
    execution.observe_submitted_nodes(owner="w1")

    assert node(request, "withdraw_observe").node_state == NodeState.OBSERVING

    request = settle(request)
    assert request.request_state == RequestState.COMPLETED


def test_a_reorg_is_recorded_with_evidence_and_reconciled_through_unknown(make_movement):
    request = make_movement(params={"sandbox": {"deposit_observe": "reorg"}}, approve=True)

    request = settle(request, until={RequestState.COMPLETED, RequestState.FAILED})

    assert request.request_state == RequestState.COMPLETED
    path = node_path(request, "deposit_observe")
    assert "UNKNOWN" in path and path[-1] == "COMPLETED"
    reorg = MovementEvent.objects.get(
        request=request,
        node_key="deposit_observe",
        kind=MovementEvent.Kind.RECORD,
        detail__has_key="reorg",
    )
    assert reorg.detail["reorg"]["reorg_count"] == 1
    assert reorg.detail["reorg"]["previous_block_hash"] or reorg.detail["reorg"]["tx_hash"]
    # Money was in flight (withdraw completed): the request waited in MANUAL_INTERVENTION
    # while the deposit was UNKNOWN, and finished on its own once recovery found the tx.
    request_path = [
        e.new_state
        for e in request.events.filter(
            node__isnull=True, kind=MovementEvent.Kind.TRANSITION
        ).order_by("id")
    ]
    assert "MANUAL_INTERVENTION" in request_path and request_path[-1] == "COMPLETED"
    assert len(ledger("deposit_credit")) == 1
    assert len(ledger("reorg")) == 1


def test_cctp_signs_each_action_once_and_completes(make_movement):
    request = make_movement("cctp", approve=True)

    request = settle(request)

    assert request.request_state == RequestState.COMPLETED
    assert node_path(request, "burn") == [
        "BLOCKED",
        "READY",
        "PREPARING",
        "AWAITING_SIGNATURE",
        "SUBMITTING",
        "SUBMITTED",
        "COMPLETED",
    ]
    assert len(ledger("sign")) == 2
    assert len(ledger("burn")) == 1 and len(ledger("mint")) == 1
    assert_history_replays(request)


def test_a_lost_broadcast_is_recovered_by_rebroadcasting_the_persisted_bytes(make_movement):
    request = make_movement(
        "cctp", params={"sandbox": {"burn": "submit_timeout_lost"}}, approve=True
    )
    execution.dispatch_ready_nodes(owner="w1")
    burn = node(request, "burn")
    assert burn.node_state == NodeState.UNKNOWN
    signed = burn.signed_payload
    assert signed and ledger("burn") == []

    request = settle(request)

    burn.refresh_from_db()
    assert request.request_state == RequestState.COMPLETED
    assert burn.signed_payload == signed
    assert len(ledger("sign", reference=burn.external_ref)) == 1
    assert len(ledger("burn")) == 1
    assert burn.result["rebroadcast"] is True


def test_a_submit_that_crashes_after_signing_is_recovered_with_the_same_bytes(make_movement):
    request = make_movement("cctp", approve=True)
    claim = execution.claim_ready_node(owner="w1")

    def crash(ctx):
        raise RuntimeError("connection reset while broadcasting")

    claim.executor.submit = crash
    execution.run_action(claim)
    burn = node(request, "burn")
    assert burn.node_state == NodeState.UNKNOWN
    signed = burn.signed_payload
    assert signed and len(ledger("sign")) == 1

    request = settle(request)

    burn.refresh_from_db()
    assert request.request_state == RequestState.COMPLETED
    assert burn.signed_payload == signed
    assert len(ledger("sign")) == 2  # the burn once, the mint once: never re-signed
    assert len(ledger("burn")) == 1


def test_a_transient_prepare_error_sends_the_node_back_to_ready_with_backoff(
    make_movement, settings
):
    settings.QTG_RETRY_BASE_SECONDS = 30
    settings.QTG_RETRY_MAX_SECONDS = 300
    request = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")

    def flaky(ctx):
        raise TransientError("venue busy")

    claim.executor.prepare = flaky
    execution.run_action(claim)

    withdraw = node(request, "withdraw")
    assert withdraw.node_state == NodeState.READY
    assert withdraw.next_attempt_at > timezone.now() + timedelta(seconds=20)
    assert "venue busy" in withdraw.last_error
    assert execution.dispatch_ready_nodes(owner="w1") == 0  # not due yet


def test_a_deterministic_prepare_error_fails_the_node(make_movement):
    request = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="w1")

    def refuse(ctx):
        raise DeterministicError("address not whitelisted")

    claim.executor.prepare = refuse
    execution.run_action(claim)

    request.refresh_from_db()
    assert node(request, "withdraw").node_state == NodeState.FAILED
    assert request.request_state == RequestState.FAILED


def test_a_node_left_preparing_by_a_dead_worker_goes_back_to_ready(make_movement):
    request = make_movement(approve=True)
    execution.claim_ready_node(owner="dead-worker")
    MovementRequestNode.objects.filter(request=request, node_key="withdraw").update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert execution.reap_expired_leases() == 1

    withdraw = node(request, "withdraw")
    assert withdraw.node_state == NodeState.READY
    assert withdraw.lease_owner == ""


def test_a_node_left_submitting_by_a_dead_worker_is_recovered_never_resubmitted(make_movement):
    request = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="dead-worker")
    claim.executor.submit = lambda ctx: (_ for _ in ()).throw(SystemExit("killed"))
    # The worker gets as far as SUBMITTING, the venue carries the withdrawal out, the worker
    # dies before it hears back.
    withdraw = node(request, "withdraw")
    withdraw.request = request
    from sandbox import venues

    with pytest.raises(SystemExit):
        execution.run_action(claim)
    venues.withdraw(
        venue="sandbox-exchange-a",
        client_key=withdraw.idempotency_key,
        asset="USDC",
        amount=request.amount,
        address="sandbox-exchange-b",
        network="ethereum",
    )
    assert node(request, "withdraw").node_state == NodeState.SUBMITTING
    MovementRequestNode.objects.filter(pk=withdraw.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )

    request = settle(request)

    assert request.request_state == RequestState.COMPLETED
    assert node_path(request, "withdraw")[-3:] == ["SUBMITTING", "UNKNOWN", "COMPLETED"]
    assert len(ledger("withdraw")) == 1
    assert node(request, "withdraw").dispatch_count == 1


def test_a_result_that_arrives_after_the_lease_was_reaped_is_recorded_not_applied(
    make_movement,
):
    request = make_movement(approve=True)
    claim = execution.claim_ready_node(owner="slow-worker")
    original_prepare = claim.executor.prepare

    def slow_prepare(ctx):
        MovementRequestNode.objects.filter(pk=claim.node_id).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        execution.reap_expired_leases()
        return original_prepare(ctx)

    claim.executor.prepare = slow_prepare
    execution.run_action(claim)

    assert node(request, "withdraw").node_state == NodeState.READY
    assert ledger("withdraw") == []
    late = MovementEvent.objects.get(
        request=request, kind=MovementEvent.Kind.RECORD, detail__has_key="late_result"
    )
    assert late.detail["late_result"] == "prepare"


def test_observation_continues_while_the_request_is_in_manual_intervention(make_movement, settings):
    settings.QTG_SANDBOX_TIME_SCALE = 0.05  # the re-mined tx is not final at once
    request = make_movement(params={"sandbox": {"deposit_observe": "reorg"}}, approve=True)
    for _ in range(500):
        execution.dispatch_ready_nodes(owner="w1")
        execution.observe_submitted_nodes(owner="w1")
        request.refresh_from_db()
        if request.request_state == RequestState.MANUAL_INTERVENTION:
            break
    assert request.request_state == RequestState.MANUAL_INTERVENTION
    assert node(request, "deposit_observe").node_state == NodeState.UNKNOWN

    assert execution.recover_unknown_nodes(owner="w1") == 1

    assert node(request, "deposit_observe").node_state == NodeState.SUBMITTED
    request.refresh_from_db()
    assert request.request_state == RequestState.EXECUTING
    assert settle(request).request_state == RequestState.COMPLETED


def test_nodes_of_a_request_that_is_not_approved_are_never_dispatched(make_movement):
    request = make_movement()

    assert execution.dispatch_ready_nodes(owner="w1") == 0
    assert set(request.nodes.values_list("node_state", flat=True)) == {NodeState.BLOCKED}


def test_an_unknown_fault_name_fails_the_node_before_anything_is_submitted(make_movement):
    request = make_movement(params={"sandbox": {"withdraw": "explode"}}, approve=True)

    request = settle(request)

    assert request.request_state == RequestState.FAILED
    assert "unknown sandbox fault" in node(request, "withdraw").last_error
    assert ledger("withdraw") == []


def test_the_sandbox_refuses_to_act_when_switched_off(make_movement, settings):
    settings.QTG_SANDBOX_ENABLED = False
    request = make_movement(approve=True)

    request = settle(request)

    assert request.request_state == RequestState.FAILED
    assert "switched off" in node(request, "withdraw").last_error

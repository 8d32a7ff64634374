"""Frontier advancement: linear chain, parallel branch with a join, a skipped branch, and the
last node handing over to derivation — with current_frontier checked after each step."""

import pytest

from movements.states import NodeState, RequestState
from tests.movements.drive import run_node, states

NS = NodeState
pytestmark = pytest.mark.django_db


def test_approval_wakes_only_the_root(make_movement):
    request = make_movement("cex_to_cex", approve=True)

    assert request.request_state == RequestState.APPROVED
    assert request.current_frontier == ["withdraw"]
    assert states(request) == {
        "withdraw": NS.READY,
        "withdraw_observe": NS.BLOCKED,
        "deposit_observe": NS.BLOCKED,
    }


def test_a_linear_chain_moves_one_node_at_a_time_and_completes(make_movement):
    request = make_movement("cex_to_cex", approve=True)

    request = run_node(request, "withdraw", NS.COMPLETED)
    assert request.request_state == RequestState.EXECUTING
    assert request.current_frontier == ["withdraw_observe"]

    request = run_node(request, "withdraw_observe", NS.COMPLETED)
    assert request.current_frontier == ["deposit_observe"]

    request = run_node(request, "deposit_observe", NS.COMPLETED)
    assert request.request_state == RequestState.COMPLETED
    assert request.current_frontier == []


def test_a_join_waits_for_both_parallel_branches(make_movement):
    request = make_movement("split_join", approve=True)
    request = run_node(request, "withdraw", NS.COMPLETED)
    assert sorted(request.current_frontier) == ["chain_observe", "withdraw_observe"]

    request = run_node(request, "withdraw_observe", NS.COMPLETED)
    assert states(request)["deposit_observe"] == NS.BLOCKED
    assert request.current_frontier == ["chain_observe"]

    request = run_node(request, "chain_observe", NS.COMPLETED)
    assert states(request)["deposit_observe"] == NS.READY
    assert request.current_frontier == ["deposit_observe"]

    request = run_node(request, "deposit_observe", NS.COMPLETED)
    assert request.request_state == RequestState.COMPLETED


def test_a_branch_whose_condition_fails_is_skipped_and_the_join_proceeds(
    make_movement, branching_template
):
    request = make_movement("branching", approve=True)

    request = run_node(request, "withdraw", NS.COMPLETED)
    assert states(request)["bridge_observe"] == NS.SKIPPED
    # A skipped node's successors are considered in turn: this one has no condition.
    assert states(request)["bridge_settle_observe"] == NS.READY
    assert sorted(request.current_frontier) == ["bridge_settle_observe", "screening_observe"]

    run_node(request, "bridge_settle_observe", NS.COMPLETED)
    request = run_node(request, "screening_observe", NS.COMPLETED)
    assert request.current_frontier == ["deposit_observe"]
    request = run_node(request, "deposit_observe", NS.COMPLETED)
    assert request.request_state == RequestState.COMPLETED


def test_a_branch_whose_condition_holds_runs(make_movement, branching_template):
    request = make_movement("branching", approve=True, params={"bridge": True})

    request = run_node(request, "withdraw", NS.COMPLETED)

    assert states(request)["bridge_observe"] == NS.READY
    assert states(request)["bridge_settle_observe"] == NS.BLOCKED


def test_the_last_node_failing_after_money_left_needs_intervention(make_movement):
    request = make_movement("cex_to_cex", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)
    run_node(request, "withdraw_observe", NS.COMPLETED)

    request = run_node(request, "deposit_observe", NS.FAILED)

    assert request.request_state == RequestState.MANUAL_INTERVENTION


def test_a_failed_first_action_is_a_safe_failure(make_movement):
    request = make_movement("cex_to_cex", approve=True)

    request = run_node(request, "withdraw", NS.FAILED)

    assert request.request_state == RequestState.FAILED


def test_reaching_a_manual_gate_waits_for_an_operator(make_movement):
    request = make_movement("cex_to_cex_gated", approve=True)

    request = run_node(request, "withdraw", NS.COMPLETED)

    assert request.request_state == RequestState.WAITING_MANUAL_ACTION
    assert request.current_frontier == ["manual_release"]

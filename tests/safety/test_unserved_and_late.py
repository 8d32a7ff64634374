"""A node no executor serves fails cleanly (or asks a person, if money may be moving), and a
late answer that contradicts a concluded failure asks a person."""

import pytest

from movements.models import MovementAttention, MovementRequestNode
from movements.services import execution
from movements.services.execution.results import late_result
from tests.execution.conftest import run_workers_once, settle
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


def _serve_with(movement, key: str, executor: str) -> None:
    # As if the deployment that created the movement had an executor this one lacks.
    MovementRequestNode.objects.filter(request=movement, node_key=key).update(executor=executor)


def test_a_ready_node_no_executor_serves_fails_with_that_reason(make_movement):
    movement = make_movement(approve=True)
    _serve_with(movement, "withdraw", "retired_exchange_withdraw")

    assert execution.dispatch_ready_nodes(owner="w") == 0
    movement.refresh_from_db()

    assert node(movement, "withdraw").node_state == "FAILED"
    assert movement.request_state == "FAILED"
    assert "no executor is registered as 'retired_exchange_withdraw'" in movement.failure_reason
    assert execution.dispatch_ready_nodes(owner="w") == 0  # and the sweep does not loop


def test_a_watched_node_no_executor_serves_asks_a_person_and_is_not_retried_at_once(
    make_movement,
):
    # The withdrawal completes; the deposit is not seen for an hour.
    movement = make_movement(approve=True, params={"sandbox": {"deposit_observe": "delay:3600"}})
    for _ in range(20):
        run_workers_once()
    assert node(movement, "deposit_observe").node_state == "OBSERVING"
    _serve_with(movement, "deposit_observe", "retired_observer")

    assert execution.observe_submitted_nodes(owner="w") == 0
    assert execution.observe_submitted_nodes(owner="w") == 0

    watched = node(movement, "deposit_observe")
    assert watched.node_state == "OBSERVING"  # money may be moving: nothing concluded
    [entry] = MovementAttention.objects.filter(request=movement)
    assert entry.reason == "no_executor"


def test_a_late_answer_that_the_withdrawal_happened_after_it_was_concluded_failed_asks_a_person(
    make_movement,
):
    movement = settle(make_movement(approve=True, params={"sandbox": {"withdraw": "fail"}}))
    failed = node(movement, "withdraw")
    assert failed.node_state == "FAILED"
    claim = execution.Claim(
        node_id=failed.pk,
        request_id=movement.pk,
        owner="slow-worker",
        state=failed.node_state,
        kind=failed.kind,
        signing_required=False,
        executor=None,
        context=None,
        node=failed,
    )

    late_result(
        claim,
        "submit",
        {"external_ref": "wd-77"},
        "node withdraw is FAILED",
        contradicts_failure=True,
    )

    [entry] = MovementAttention.objects.filter(request=movement)
    assert entry.reason == "late_result"
    assert entry.evidence["outcome"] == {"external_ref": "wd-77"}

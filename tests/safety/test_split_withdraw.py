"""The split_withdraw template: two withdrawals from two exchanges at once, one deposit. A
failure of one leg never ends the movement while the other may still be moving money."""

from decimal import Decimal

import pytest

from movements.executors.base import DeterministicError
from reservations.models import ReservationState
from sandbox.faults import UnknownFault, parse_fault
from tests.execution.conftest import ledger, settle
from tests.movements.drive import node, states

pytestmark = pytest.mark.django_db


def split(make_movement, amount="100.00", **sandbox):
    params = {"second_source": "sandbox-exchange-c"}
    if sandbox:
        params["sandbox"] = sandbox
    return make_movement("split_withdraw", approve=True, amount=amount, params=params)


def test_both_halves_leave_their_exchanges_and_the_deposit_completes_the_movement(
    make_movement,
):
    # Three of the smallest unit: the parts are one and two units, never a rounded amount.
    movement = settle(split(make_movement, amount="0.000000000000000003"))

    assert movement.request_state == "COMPLETED"
    assert set(states(movement).values()) == {"COMPLETED"}
    withdrawals = {e.venue: e.amount for e in ledger("withdraw")}
    assert withdrawals == {
        "sandbox-exchange-a": Decimal("0.000000000000000001"),
        "sandbox-exchange-c": Decimal("0.000000000000000002"),
    }


def test_a_leg_that_fails_while_the_other_is_unknown_leaves_the_movement_running(
    make_movement,
):
    # withdraw_a's venue carries the withdrawal out but never answers: UNKNOWN, money may
    # have left. withdraw_b is refused. Neither is a reason to call the movement FAILED yet.
    movement = split(make_movement, withdraw_a="submit_timeout_landed", withdraw_b="fail")

    from movements.services import execution
    from tests.execution.conftest import run_workers_once

    execution.dispatch_ready_nodes(owner="w")
    movement.refresh_from_db()
    assert node(movement, "withdraw_a").node_state == "UNKNOWN"
    assert node(movement, "withdraw_b").node_state == "FAILED"
    assert movement.request_state == "EXECUTING"
    assert movement.reservation.state == ReservationState.HELD

    # Recovery finds withdraw_a's withdrawal: a side effect completed next to a failure.
    run_workers_once()
    movement = settle(movement)
    assert node(movement, "withdraw_a").node_state == "COMPLETED"
    assert movement.request_state == "MANUAL_INTERVENTION"
    assert movement.reservation.state == ReservationState.HELD


def test_both_legs_refused_fail_the_movement_and_release_its_reservation(make_movement):
    movement = settle(split(make_movement, withdraw_a="fail", withdraw_b="fail"))

    assert movement.request_state == "FAILED"
    assert movement.reservation.state == ReservationState.RELEASED


def test_the_second_source_is_required(make_movement):
    movement = make_movement("split_withdraw", approve=False)

    assert movement.request_state == "FAILED"
    assert "second_source" in movement.failure_reason


@pytest.mark.parametrize(
    "raw",
    ["submit_delay", "submit_delay:x", "submit_delay:-1", "submit_delay:inf", "submit_delay:nan"],
)
def test_a_submit_delay_needs_a_finite_number_of_seconds(raw):
    with pytest.raises(UnknownFault):
        parse_fault(raw)


def test_a_submit_delay_makes_the_venue_call_itself_slow_and_then_succeed(make_movement):
    import time

    movement = make_movement(approve=True, params={"sandbox": {"withdraw": "submit_delay:0.3"}})
    from movements.services import execution

    started = time.monotonic()
    execution.dispatch_ready_nodes(owner="w", limit=1)
    took = time.monotonic() - started

    assert took >= 0.3
    assert node(movement, "withdraw").node_state == "COMPLETED"


def test_once_a_leg_failed_the_other_side_effect_never_starts(make_movement):
    """withdraw_a is refused while being prepared; withdraw_b, prepared in the same batch,
    is held back before its submit instead of moving money out of a failing movement."""
    from movements.services import execution

    movement = split(make_movement, withdraw_a="fail")
    claims = execution.claim_ready_nodes(owner="w", limit=10)
    assert {c.node.node_key for c in claims} == {"withdraw_a", "withdraw_b"}
    a = next(c for c in claims if c.node.node_key == "withdraw_a")
    a.executor.prepare = lambda ctx: (_ for _ in ()).throw(DeterministicError("refused"))

    execution.run_actions(claims)

    movement.refresh_from_db()
    assert node(movement, "withdraw_a").node_state == "FAILED"
    assert node(movement, "withdraw_b").node_state == "READY"  # held back, never submitted
    assert ledger("withdraw") == []
    assert movement.request_state == "FAILED"
    assert movement.reservation.state == ReservationState.RELEASED
    assert execution.dispatch_ready_nodes(owner="w") == 0  # and not dispatched later


def test_a_leg_reaped_back_to_ready_next_to_a_failed_one_settles_the_movement(make_movement):
    """withdraw_b is refused while withdraw_a's worker is still preparing (money may move:
    no verdict). That worker dies; the reaper puts withdraw_a back to READY, which moves no
    money, so the movement is derived again and ends FAILED instead of hanging EXECUTING."""
    from datetime import timedelta

    from django.utils import timezone

    from movements.models import MovementRequestNode
    from movements.services import execution

    movement = split(make_movement, withdraw_b="fail")
    claims = execution.claim_ready_nodes(owner="w", limit=10)
    b = next(c for c in claims if c.node.node_key == "withdraw_b")
    execution.run_actions([b])
    movement.refresh_from_db()
    assert node(movement, "withdraw_a").node_state == "PREPARING"
    assert movement.request_state == "EXECUTING"

    MovementRequestNode.objects.filter(pk=node(movement, "withdraw_a").pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert execution.reap_expired_leases() == 1

    movement.refresh_from_db()
    assert node(movement, "withdraw_a").node_state == "READY"
    assert movement.request_state == "FAILED"
    assert movement.reservation.state == ReservationState.RELEASED

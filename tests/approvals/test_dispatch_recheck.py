"""Dispatch re-checks what was approved (issue 28): below the application, deleting a
movement's approval rows and raising its amount, editing an approval row, or lowering the
quorum on the movement row, all end the node READY -> FAILED "approval missing or altered"
with evidence, and nothing is sent."""

import pytest
from django.db import connection, transaction

from movements.models import MovementApproval, MovementRequest
from movements.services import movement_approve
from movements.services.execution.claims import claim_ready_nodes
from movements.states import NodeState, RequestState
from sandbox.models import Withdrawal
from tests.approvals.conftest import act
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


def tamper(sql: str, params=(), model=MovementApproval) -> None:
    """The database owner's statement, triggers bypassed on PostgreSQL."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql.format(table=model._meta.db_table), params)


def db(value):
    return MovementApproval._meta.get_field("request").get_db_prep_value(value, connection)


def assert_refused_and_nothing_sent(movement, why: str) -> None:
    claims = claim_ready_nodes(owner="test")

    assert claims == []
    withdraw = node(movement, "withdraw")
    assert withdraw.node_state == NodeState.FAILED
    assert withdraw.last_error.startswith("approval missing or altered: ")
    assert why in withdraw.last_error
    failed = withdraw.events.get(new_state=NodeState.FAILED)
    assert failed.old_state == NodeState.READY
    assert failed.detail["approval"] == "missing or altered"
    assert not Withdrawal.objects.exists()
    movement.refresh_from_db()
    assert movement.request_state == RequestState.FAILED


def test_deleted_approvals_and_a_raised_amount_stop_dispatch(make_movement, bob):
    movement = make_movement()
    movement_approve(request=movement, actor=act(bob))
    tamper("DELETE FROM {table} WHERE request_id = %s", [db(movement.pk)])
    tamper(
        "UPDATE {table} SET amount = %s WHERE id = %s",
        ["100000.00", db(movement.pk)],
        model=MovementRequest,
    )

    assert_refused_and_nothing_sent(movement, "0 valid approval(s)")


def test_deleted_approvals_and_a_lowered_quorum_on_the_movement_row_stop_dispatch(
    make_movement, bob
):
    movement = make_movement()
    movement_approve(request=movement, actor=act(bob))
    tamper("DELETE FROM {table} WHERE request_id = %s", [db(movement.pk)])
    tamper(
        "UPDATE {table} SET approvals_required = 0 WHERE id = %s",
        [db(movement.pk)],
        model=MovementRequest,
    )

    assert_refused_and_nothing_sent(movement, "1 required")


def test_an_approval_rebound_to_a_raised_amount_is_named_as_altered(make_movement, bob):
    from movements.services.approvals import approval_binding

    movement = make_movement()
    movement_approve(request=movement, actor=act(bob))
    approval = MovementApproval.objects.get(request=movement)
    tamper(
        "UPDATE {table} SET amount = %s WHERE id = %s",
        ["100000.00", db(movement.pk)],
        model=MovementRequest,
    )
    movement.refresh_from_db()
    tamper(
        "UPDATE {table} SET binding_hash = %s WHERE id = %s",
        [approval_binding(movement), approval.pk],
    )

    assert_refused_and_nothing_sent(movement, f"approval {approval.pk} by user:bob: its content")


def test_an_intact_approval_still_dispatches(make_movement, bob):
    movement = make_movement()
    movement_approve(request=movement, actor=act(bob))

    assert [c.node.node_key for c in claim_ready_nodes(owner="test")] == ["withdraw"]

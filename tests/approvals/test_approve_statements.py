"""An approval costs at most 15 SQL statements on PostgreSQL (issue 34): the approval, the policy
check, the state change, the root nodes' READY and both callback events, built from one read of
the movement. Counted as the database receives them: each parameter set of a pipelined
``executemany`` is one statement; the savepoint the test's own transaction puts around the
service is not counted (in production the approve is its own transaction)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from callbacks.models import Event, Subscription
from movements.models import MovementApproval
from movements.services import movement_approve
from tests.approvals.conftest import act, staff
from tests.statements import statements

pytestmark = pytest.mark.postgres

STATEMENTS_PER_APPROVE = 15


def approve_counted(movement, user) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        movement_approve(request=movement.pk, actor=act(user))
    return statements(captured)


@pytest.fixture
def operator_subscription(db):
    """A subscriber to every event: each callback event is also a delivery to write."""
    return Subscription.objects.create(
        name="all", url="https://hooks.example.com/all", secret="s" * 32, event_types=["*"]
    )


def test_one_approver_approves_in_at_most_15_statements(make_movement, operator_subscription):
    movement = make_movement()
    approver = staff("approver-1", "operators")

    sent = approve_counted(movement, approver)

    assert len(sent) <= STATEMENTS_PER_APPROVE, "\n".join(s[:160] for s in sent)
    movement.refresh_from_db()
    assert movement.request_state == "APPROVED"
    assert list(
        Event.objects.filter(request=movement)
        .order_by("sequence")
        .values_list("event_type", flat=True)
    )[-2:] == ["request_approved", "frontier_advanced"]


def test_each_of_two_approvers_approves_in_at_most_15_statements(
    make_movement, policy, operator_subscription
):
    policy(approvals_required=2, amount_above="0", key="two-approvers")
    movement = make_movement(amount="50")
    first, second = staff("approver-1", "operators"), staff("approver-2", "operators")

    sent_first = approve_counted(movement, first)
    movement.refresh_from_db()
    assert movement.request_state == "PENDING_APPROVAL"
    sent_second = approve_counted(movement, second)

    assert len(sent_first) <= STATEMENTS_PER_APPROVE, "\n".join(s[:160] for s in sent_first)
    assert len(sent_second) <= STATEMENTS_PER_APPROVE, "\n".join(s[:160] for s in sent_second)
    movement.refresh_from_db()
    assert movement.request_state == "APPROVED"
    assert MovementApproval.objects.filter(request=movement).count() == 2

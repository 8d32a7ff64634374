"""Approvers racing on one movement: exactly one of them moves it to APPROVED (PostgreSQL
only: SQLite serialises writers, so the race cannot be staged there)."""

import threading
from decimal import Decimal

import pytest

from movements.models import MovementApproval, MovementRequest
from movements.services import movement_approve, movement_create, route_templates_sync
from movements.services.approvals import approval_policy_activate, approval_policy_propose
from movements.states import RequestState
from qtg.core.actors import Actor
from qtg.core.errors import QTGError
from tests.approvals.conftest import staff
from tests.threads import own_connection

APPROVERS = 8


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_approvals_make_exactly_one_transition():
    route_templates_sync()
    proposer, activator = staff("proposer"), staff("activator")
    approval_policy_activate(
        policy=approval_policy_propose(
            actor=Actor.for_user(proposer),
            key="large",
            approvals_required=3,
            amount_above=Decimal("10000"),
        ),
        actor=Actor.for_user(activator),
    )
    movement = movement_create(
        template="cex_to_cex",
        asset="USDC",
        amount="50000",
        source="sandbox-exchange-a",
        destination="sandbox-exchange-b",
        actor=Actor.for_user(staff("creator-1")),
    )
    users = [staff(f"approver-{i}") for i in range(APPROVERS)]
    start = threading.Barrier(APPROVERS)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    @own_connection(errors)
    def approve(user) -> None:
        try:
            start.wait(timeout=30)
            movement_approve(request=movement.pk, actor=Actor.for_user(user))
            outcomes.append("approved")
        except QTGError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=approve, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert errors == []
    movement = MovementRequest.objects.get(pk=movement.pk)
    assert movement.request_state == RequestState.APPROVED
    # Three approvals were taken; everyone after them found the movement approved (409).
    assert outcomes.count("approved") == 3
    assert outcomes.count("conflict") == APPROVERS - 3
    assert MovementApproval.objects.filter(request=movement).count() == 3
    assert movement.events.filter(new_state=RequestState.APPROVED).count() == 1
    assert movement.nodes.filter(node_state="READY").count() == 1

"""An approval is bound to what was approved: if the plan, amount, asset, source or
destination differ at dispatch, the approval is void and the movement cannot start."""

import pytest

from movements.models import MovementPlanNode, MovementRequest
from movements.services import movement_approve
from movements.services.execution.claims import claim_ready_nodes
from movements.states import NodeState, RequestState
from tests.approvals.conftest import act
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


def test_an_unchanged_movement_starts(make_movement, bob):
    movement = make_movement()
    movement_approve(request=movement, actor=act(bob))

    claims = claim_ready_nodes(owner="test")

    assert [c.node.node_key for c in claims] == ["withdraw"]
    assert movement.approvals.get().void_at is None


def test_a_changed_plan_voids_the_approval_and_the_movement_cannot_start(make_movement, bob):
    movement = make_movement()
    movement_approve(request=movement, actor=act(bob))
    MovementPlanNode.objects.filter(request=movement, key="withdraw").update(
        config={"venue": "sandbox-exchange-a", "to": "somewhere-else", "network": "ethereum"}
    )

    claims = claim_ready_nodes(owner="test")

    assert claims == []
    withdraw = node(movement, "withdraw")
    assert withdraw.node_state == NodeState.FAILED
    assert withdraw.last_error.startswith("approval missing or altered")
    approval = movement.approvals.get()
    assert approval.void_at is not None
    movement.refresh_from_db()
    assert movement.request_state == RequestState.FAILED
    void_event = movement.events.get(detail__approvals_void__isnull=False)
    assert void_event.detail["approvals_void"] == ["user:bob"]
    assert void_event.detail["approved_hash"] != void_event.detail["current_hash"]


@pytest.mark.parametrize(
    "change",
    [
        {"amount": "100.01"},
        {"asset": "USDT"},
        {"source": "sandbox-exchange-c"},
        {"destination": "sandbox-exchange-c"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_a_changed_amount_asset_source_or_destination_voids_the_approval(
    make_movement, bob, change
):
    movement = make_movement()
    movement_approve(request=movement, actor=act(bob))
    MovementRequest.objects.filter(pk=movement.pk).update(**change)

    assert claim_ready_nodes(owner="test") == []

    assert node(movement, "withdraw").node_state == NodeState.FAILED
    assert movement.approvals.get().void_at is not None

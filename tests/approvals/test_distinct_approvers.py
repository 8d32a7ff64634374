"""Distinct approvers are distinct user ids: a rename does not make a second person."""

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from movements.models import MovementApproval
from movements.services import movement_approve
from movements.states import RequestState
from qtg.core.errors import NotPermitted
from tests.approvals.conftest import act

pytestmark = pytest.mark.django_db


def test_a_user_renamed_between_two_approvals_cannot_approve_again(make_movement, policy, alice):
    # given a movement that needs two approvers, approved once by alice
    policy(approvals_required=2)
    movement = make_movement(amount="20000")
    movement_approve(request=movement, actor=act(alice))

    # when alice is renamed and approves again
    alice.username = "alice-renamed"
    alice.save(update_fields=["username"])
    renamed = User.objects.get(pk=alice.pk)
    with pytest.raises(NotPermitted, match="already approved"):
        movement_approve(request=movement, actor=act(renamed))

    # then the movement still waits for a second person
    movement.refresh_from_db()
    assert movement.request_state == RequestState.PENDING_APPROVAL
    assert movement.approvals.filter(approved_by=alice).count() == 1


def test_the_database_refuses_two_approvals_of_one_user_whatever_they_were_called(
    make_movement, alice
):
    movement = make_movement(amount="20000")
    fields = {"request": movement, "approved_by": alice, "binding_hash": "x" * 64}
    MovementApproval.objects.create(approver="user:alice", **fields)

    with pytest.raises(IntegrityError), transaction.atomic():
        MovementApproval.objects.create(approver="user:alice-renamed", **fields)


def test_two_people_who_held_one_name_in_turn_are_two_approvers_at_dispatch(
    make_movement, policy, bob
):
    from movements.services.execution.claims import claim_ready_nodes
    from tests.approvals.conftest import staff

    # given a movement that needs two approvers, approved by bob, who is then renamed ...
    policy(approvals_required=2)
    movement = make_movement(amount="20000")
    movement_approve(request=movement, actor=act(bob))
    bob.username = "bob-renamed"
    bob.save(update_fields=["username"])
    # ... and by another person who now holds the name "bob"
    movement_approve(request=movement, actor=act(staff("bob", "operators")))
    movement.refresh_from_db()
    assert movement.request_state == RequestState.APPROVED

    # then dispatch counts two people (by user id), not one name
    assert [c.node.node_key for c in claim_ready_nodes(owner="test")] == ["withdraw"]

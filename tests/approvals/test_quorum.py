"""Approval policies: distinct approvers (never the creator), their groups, versions that a
second person activates, and the version a movement was approved under."""

import pytest

from movements.models import ApprovalPolicy, MovementEvent, PolicyStatus
from movements.services import movement_approve
from movements.services.approvals import (
    approval_policy_activate,
    approval_policy_propose,
    approval_policy_reject,
)
from movements.states import RequestState
from qtg.core.errors import NotPermitted
from tests.approvals.conftest import act

pytestmark = pytest.mark.django_db


def test_without_a_policy_one_approver_approves(make_movement, bob):
    movement = make_movement(amount="50000")

    movement_approve(request=movement, actor=act(bob))

    movement.refresh_from_db()
    assert movement.request_state == RequestState.APPROVED
    assert movement.approvals_required == 1
    assert movement.approval_policy is None


def test_above_the_threshold_the_movement_waits_for_the_second_approver(
    make_movement, policy, alice, bob
):
    active = policy(approvals_required=2)
    movement = make_movement(amount="10000.01")

    movement_approve(request=movement, actor=act(alice))
    movement.refresh_from_db()
    assert movement.request_state == RequestState.PENDING_APPROVAL
    assert movement.approvals.count() == 1

    movement_approve(request=movement, actor=act(bob))
    movement.refresh_from_db()
    assert movement.request_state == RequestState.APPROVED
    assert movement.approval_policy == active
    assert movement.approved_by == bob
    transition = movement.events.get(new_state=RequestState.APPROVED)
    assert transition.detail["policy"] == "large v1"
    assert transition.detail["approvals"] == ["user:alice", "user:bob"]


def test_at_the_threshold_one_approver_is_enough(make_movement, policy, alice):
    policy(approvals_required=2, amount_above="10000")
    movement = make_movement(amount="10000")

    movement_approve(request=movement, actor=act(alice))

    movement.refresh_from_db()
    assert movement.request_state == RequestState.APPROVED


def test_the_same_person_cannot_approve_twice(make_movement, policy, alice):
    policy(approvals_required=2)
    movement = make_movement(amount="20000")
    movement_approve(request=movement, actor=act(alice))

    with pytest.raises(NotPermitted, match="already approved"):
        movement_approve(request=movement, actor=act(alice))

    assert movement.approvals.count() == 1


def test_the_creator_never_counts(make_movement, policy, alice, bob):
    policy(approvals_required=2)
    movement = make_movement(amount="20000", by=alice)

    with pytest.raises(NotPermitted, match="four-eyes"):
        movement_approve(request=movement, actor=act(alice))

    movement_approve(request=movement, actor=act(bob))
    movement.refresh_from_db()
    assert movement.request_state == RequestState.PENDING_APPROVAL


def test_the_last_approval_must_come_from_a_required_group(
    make_movement, policy, alice, bob, carol
):
    policy(approvals_required=2, required_groups=["supervisors"])
    movement = make_movement(amount="20000")
    movement_approve(request=movement, actor=act(alice))

    with pytest.raises(NotPermitted, match="must come from supervisors"):
        movement_approve(request=movement, actor=act(bob))

    movement_approve(request=movement, actor=act(carol))
    movement.refresh_from_db()
    assert movement.request_state == RequestState.APPROVED


def test_a_supervisor_first_leaves_the_second_approval_to_anyone(
    make_movement, policy, alice, carol
):
    policy(approvals_required=2, required_groups=["supervisors"])
    movement = make_movement(amount="20000")

    movement_approve(request=movement, actor=act(carol))
    movement_approve(request=movement, actor=act(alice))

    movement.refresh_from_db()
    assert movement.request_state == RequestState.APPROVED


def test_the_strictest_covering_policy_applies(make_movement, policy):
    policy(key="usdc", approvals_required=2, amount_above=None, asset="USDC")
    policy(key="huge", approvals_required=3, amount_above="1000000")

    assert make_movement(amount="5").approvals_required == 2
    assert make_movement(amount="2000000").approvals_required == 3
    assert make_movement(amount="2000000", asset="BTC").approvals_required == 3
    assert make_movement(amount="5", asset="BTC").approvals_required == 1


def test_a_proposed_policy_has_no_effect_until_a_second_person_activates_it(
    make_movement, alice, carol
):
    proposed = approval_policy_propose(
        actor=act(alice), key="all", approvals_required=2, required_groups=[]
    )
    assert make_movement().approvals_required == 1

    with pytest.raises(NotPermitted, match="four-eyes"):
        approval_policy_activate(policy=proposed, actor=act(alice))
    approval_policy_activate(policy=proposed, actor=act(carol))

    assert make_movement().approvals_required == 2


def test_a_new_version_supersedes_the_old_one_only_when_activated(
    make_movement, policy, alice, dave
):
    first = policy(key="all", approvals_required=2, amount_above=None)
    second = approval_policy_propose(actor=act(alice), key="all", approvals_required=3)
    assert second.version == 2
    assert make_movement().approvals_required == 2

    approval_policy_activate(policy=second, actor=act(dave))

    first.refresh_from_db()
    assert first.status == PolicyStatus.SUPERSEDED
    assert make_movement().approvals_required == 3


def test_a_rejected_proposal_changes_nothing(make_movement, policy, alice, dave):
    policy(key="all", approvals_required=2, amount_above=None)
    proposal = approval_policy_propose(actor=act(alice), key="all", approvals_required=1)

    approval_policy_reject(policy=proposal, actor=act(dave))

    assert make_movement().approvals_required == 2
    assert ApprovalPolicy.objects.get(pk=proposal.pk).status == PolicyStatus.REJECTED


def test_a_policy_activated_while_a_movement_waits_applies_at_its_next_approval(
    make_movement, policy, alice, bob
):
    movement = make_movement(amount="20000")
    assert movement.approvals_required == 1
    policy(approvals_required=2)

    movement_approve(request=movement, actor=act(alice))

    movement.refresh_from_db()
    assert movement.request_state == RequestState.PENDING_APPROVAL
    assert movement.approvals_required == 2
    assert movement.events.filter(
        kind=MovementEvent.Kind.RECORD, detail__approval_policy_changed_from__isnull=False
    ).exists()
    movement_approve(request=movement, actor=act(bob))
    movement.refresh_from_db()
    assert movement.request_state == RequestState.APPROVED

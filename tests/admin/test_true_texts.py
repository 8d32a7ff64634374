"""Confirmation texts say what the action does under the rules in force: the two-person rule
on or off, and what becomes of the reservation (HELD once money left a venue)."""

import pytest

from tests.admin.helpers import action_url


def confirmation_text(client, movement, action: str) -> str:
    html = client.get(action_url(movement, action)).content.decode()
    start = html.index('id="qtg-what-happens"')
    return html[start : html.index("</p>", start)]


@pytest.mark.parametrize("action", ["force_fail", "force_complete"])
def test_with_the_two_person_rule_off_a_force_happens_at_once(
    action, settings, client, supervisor, intervention_failed
):
    settings.QTG_TWO_PERSON_OVERRIDES = False
    movement = intervention_failed()
    client.force_login(supervisor)

    text = confirmation_text(client, movement, action)

    assert "two-person rule is off" in text
    assert "proposes" not in text


@pytest.mark.parametrize("action", ["force_fail", "force_complete"])
def test_with_the_two_person_rule_on_a_force_is_a_proposal(
    action, settings, client, supervisor, intervention_failed
):
    settings.QTG_TWO_PERSON_OVERRIDES = True
    movement = intervention_failed()
    client.force_login(supervisor)

    text = confirmation_text(client, movement, action)

    assert "proposes it" in text and "another supervisor confirms" in text


def test_force_fail_after_money_left_says_the_reservation_stays_held(
    client, supervisor, intervention_failed
):
    # given the withdrawal completed (money left the exchange), then its observation failed
    movement = intervention_failed()
    client.force_login(supervisor)

    text = confirmation_text(client, movement, "force_fail")

    assert "stays HELD" in text and "withdraw" in text
    assert "RELEASED" not in text


def test_cancel_before_any_money_left_says_the_reservation_is_released(
    client, supervisor, executing
):
    movement = executing()
    client.force_login(supervisor)

    text = confirmation_text(client, movement, "cancel")

    assert "RELEASED" in text
    assert "two-person" not in text


@pytest.fixture
def two_approvers(groups, supervisor):
    """The policy in force: movements above 1,000 need two approvers, one a supervisor."""
    from decimal import Decimal

    from movements.services.approvals import approval_policy_activate, approval_policy_propose
    from qtg.core.actors import Actor
    from tests.admin.conftest import staff_user

    proposed = approval_policy_propose(
        actor=Actor.for_user(supervisor),
        key="two-above-1k",
        approvals_required=2,
        required_groups=["supervisors"],
        amount_above=Decimal("1000"),
    )
    approval_policy_activate(
        policy=proposed, actor=Actor.for_user(staff_user("sue", "supervisors"))
    )


def test_a_first_of_two_approvals_says_the_movement_keeps_waiting(
    client, op, two_approvers, make_movement
):
    movement = make_movement(amount="2500.00")
    client.force_login(op)

    text = confirmation_text(client, movement, "approve")

    assert "approval 1 of 2" in text and "stays PENDING_APPROVAL" in text
    assert "one of them from supervisors" in text
    assert "is APPROVED" not in text


def test_the_last_approval_needed_says_the_movement_is_approved(
    client, op, supervisor, two_approvers, make_movement
):
    from movements.services import movement_approve
    from qtg.core.actors import Actor

    movement = make_movement(amount="2500.00")
    movement_approve(request=movement, actor=Actor.for_user(op))
    client.force_login(supervisor)

    text = confirmation_text(client, movement, "approve")

    assert "last approval needed (2 of 2)" in text and "is APPROVED" in text


def test_an_approval_without_a_policy_approves_at_once(client, op, make_movement):
    movement = make_movement(amount="2500.00")
    client.force_login(op)

    assert "last approval needed (1 of 1)" in confirmation_text(client, movement, "approve")


def test_stopping_the_watch_after_money_left_says_manual_intervention_and_held(
    client, supervisor, executing
):
    from tests.admin.conftest import TO_COMPLETED, drive

    movement = drive(executing(), "withdraw", *TO_COMPLETED)
    movement = drive(movement, "withdraw_observe", "OBSERVING")
    client.force_login(supervisor)

    text = confirmation_text(client, movement, "stop_watching")

    assert "MANUAL_INTERVENTION" in text and "stays HELD" in text
    assert "RELEASED" not in text


@pytest.mark.parametrize("two_person", [True, False])
def test_resolving_an_unknown_node_says_whether_failed_is_a_proposal(
    two_person, settings, client, supervisor, intervention_unknown
):
    settings.QTG_TWO_PERSON_OVERRIDES = two_person
    movement = intervention_unknown()
    client.force_login(supervisor)

    text = confirmation_text(client, movement, "resolve_unknown")

    assert ("proposes it" in text) is two_person
    assert ("two-person rule is off" in text) is not two_person


@pytest.mark.parametrize("two_person", [True, False])
def test_cancelling_with_funds_in_transit_says_held_and_whether_it_is_a_proposal(
    two_person, settings, client, supervisor, waiting_at_gate
):
    settings.QTG_TWO_PERSON_OVERRIDES = two_person
    movement = waiting_at_gate()  # the withdrawal completed: funds in transit
    client.force_login(supervisor)

    text = confirmation_text(client, movement, "cancel")

    assert "stays HELD" in text and "RELEASED" not in text
    assert ("proposes it" in text) is two_person
    assert ("two-person rule is off" in text) is not two_person

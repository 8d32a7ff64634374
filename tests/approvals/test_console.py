"""The console: policies and addresses proposed by one person and decided by another,
overrides proposed on the movement page and confirmed by another supervisor, approval
progress on the movement page."""

import pytest
from django.urls import reverse

from movements.models import AddressBookEntry, ApprovalPolicy, OverrideProposal, PolicyStatus
from movements.permissions import SUPERVISORS, ensure_operator_groups
from movements.services import movement_approve
from movements.services.approvals import approval_policy_activate, approval_policy_propose
from movements.states import NodeState as NS
from movements.states import RequestState as RS
from qtg.core.actors import Actor
from tests.admin.conftest import staff_user
from tests.admin.helpers import change_url, messages_of, post_action
from tests.movements.drive import run_node

pytestmark = pytest.mark.django_db


@pytest.fixture
def sup1(db):
    ensure_operator_groups()
    return staff_user("sup1", SUPERVISORS)


@pytest.fixture
def sup2(sup1):
    return staff_user("sup2", SUPERVISORS)


def logged_in(client, user):
    client.force_login(user)
    return client


def bulk(client, model: str, action: str, rows) -> list[str]:
    response = client.post(
        reverse(f"admin:movements_{model}_changelist"),
        {"action": action, "_selected_action": [r.pk for r in rows]},
        follow=True,
    )
    return messages_of(response)


def test_a_policy_added_in_the_console_waits_for_a_second_person(client, sup1, sup2):
    client = logged_in(client, sup1)
    client.post(
        reverse("admin:movements_approvalpolicy_add"),
        {
            "key": "large",
            "asset": "USDC",
            "amount_above": "10000",
            "approvals_required": "2",
            "required_groups": '["supervisors"]',
        },
    )
    policy = ApprovalPolicy.objects.get(key="large")
    assert (policy.version, policy.status, policy.proposed_by) == (1, PolicyStatus.PROPOSED, sup1)

    refused = bulk(client, "approvalpolicy", "activate_selected", [policy])
    assert any("four-eyes" in m for m in refused)
    policy.refresh_from_db()
    assert policy.status == PolicyStatus.PROPOSED

    client.force_login(sup2)
    bulk(client, "approvalpolicy", "activate_selected", [policy])
    policy.refresh_from_db()
    assert (policy.status, policy.decided_by) == (PolicyStatus.ACTIVE, sup2)


def test_a_policy_that_could_never_be_met_is_refused_by_the_form(client, sup1):
    response = logged_in(client, sup1).post(
        reverse("admin:movements_approvalpolicy_add"),
        {"key": "bad", "approvals_required": "1", "required_groups": '["a", "b"]'},
    )

    assert response.status_code == 200  # the form again, with the error
    assert "more groups than approvers" in response.content.decode()
    assert not ApprovalPolicy.objects.exists()


def test_an_address_added_in_the_console_is_approved_by_someone_else(client, sup1, sup2):
    client = logged_in(client, sup1)
    client.post(
        reverse("admin:movements_addressbookentry_add"),
        {"asset": "usdc", "network": "ethereum", "address": "0xabc", "label": "Treasury"},
    )
    entry = AddressBookEntry.objects.get()
    assert (entry.asset, entry.status) == ("USDC", "PROPOSED")

    client.force_login(sup2)
    bulk(client, "addressbookentry", "approve_selected", [entry])
    entry.refresh_from_db()
    assert (entry.status, entry.decided_by) == ("ACTIVE", sup2)


def test_force_fail_in_the_console_proposes_and_another_supervisor_confirms(
    settings, client, make_movement, sup1, sup2
):
    settings.QTG_TWO_PERSON_OVERRIDES = True
    movement = make_movement("cex_to_cex", approve=True)
    run_node(movement, "withdraw", NS.COMPLETED)
    run_node(movement, "withdraw_observe", NS.COMPLETED)
    movement = run_node(movement, "deposit_observe", NS.FAILED)

    client = logged_in(client, sup1)
    response = post_action(client, movement, "force_fail", {"reason": "venue confirms"})
    assert any("proposed" in m for m in messages_of(response))
    movement.refresh_from_db()
    assert movement.request_state == RS.MANUAL_INTERVENTION
    proposal = OverrideProposal.objects.get()
    page = client.get(change_url(movement)).content.decode().lower()
    assert "two-person overrides" in page and "force-fail" in page

    refused = client.post(confirm_url(proposal), {"reason": "me too"}, follow=True)
    assert any("another supervisor" in m for m in messages_of(refused))
    movement.refresh_from_db()
    assert movement.request_state == RS.MANUAL_INTERVENTION

    client.force_login(sup2)
    client.post(confirm_url(proposal), {"reason": "checked the venue myself"})
    movement.refresh_from_db()
    assert movement.request_state == RS.FAILED
    assert "confirmed: checked the venue myself" in movement.failure_reason


def confirm_url(proposal) -> str:
    return reverse("admin:movements_overrideproposal_confirm", args=[proposal.pk])


@pytest.fixture
def proposed_force_complete(settings, make_movement, sup1):
    """A movement in MANUAL_INTERVENTION after its withdrawal, and sup1's proposal to
    force-complete it (two-person rule on)."""
    from movements.models import OverrideAction
    from movements.services.overrides import override_propose

    settings.QTG_TWO_PERSON_OVERRIDES = True
    movement = make_movement("cex_to_cex", approve=True, amount="640.00")
    run_node(movement, "withdraw", NS.COMPLETED)
    run_node(movement, "withdraw_observe", NS.COMPLETED)
    movement = run_node(movement, "deposit_observe", NS.FAILED)
    return override_propose(
        request=movement,
        action=OverrideAction.FORCE_COMPLETE,
        actor=Actor.for_user(sup1),
        reason="deposit seen on the exchange statement",
    )


def test_confirming_an_override_has_its_own_page_with_the_proposal_and_its_evidence(
    client, proposed_force_complete, sup2
):
    proposal = proposed_force_complete
    client = logged_in(client, sup2)

    listing = client.get(reverse("admin:movements_overrideproposal_changelist")).content.decode()
    page = client.get(confirm_url(proposal)).content.decode()

    assert 'name="action"' not in listing  # no one-click bulk confirm
    assert confirm_url(proposal) in listing
    assert "deposit seen on the exchange statement" in page
    assert "640.000000 USDC" in page and "by sup1" in page
    assert "COMPLETED" in page and "CONSUMED" in page
    assert 'name="reason"' in page
    proposal.request.refresh_from_db()
    assert proposal.request.request_state == RS.MANUAL_INTERVENTION  # a GET changes nothing


def test_confirming_an_override_without_a_reason_changes_nothing(
    client, proposed_force_complete, sup2
):
    proposal = proposed_force_complete
    client = logged_in(client, sup2)

    response = client.post(confirm_url(proposal), {"reason": "  "})

    assert response.status_code == 200 and b"This field is required" in response.content
    proposal.refresh_from_db()
    assert proposal.status == "PROPOSED"
    assert proposal.request.request_state == RS.MANUAL_INTERVENTION


def test_the_proposer_is_shown_no_confirm_link_and_is_refused_the_page(
    client, proposed_force_complete, sup1
):
    proposal = proposed_force_complete
    client = logged_in(client, sup1)

    listing = client.get(reverse("admin:movements_overrideproposal_changelist")).content.decode()
    response = client.get(confirm_url(proposal), follow=True)

    assert confirm_url(proposal) not in listing
    assert any("another supervisor" in m for m in messages_of(response))


def test_the_movement_page_shows_the_approval_progress(client, make_movement, sup1, sup2):
    approval_policy_activate(
        policy=approval_policy_propose(
            actor=Actor.for_user(sup1), key="all", approvals_required=2, required_groups=[]
        ),
        actor=Actor.for_user(sup2),
    )
    movement = make_movement()
    movement_approve(request=movement, actor=Actor.for_user(sup1))

    page = logged_in(client, sup2).get(change_url(movement)).content.decode()

    assert "1 of 2 approvals" in page
    assert "user:sup1" in page


def test_the_override_proposals_page_links_each_movement(client, make_movement, sup1, settings):
    settings.QTG_TWO_PERSON_OVERRIDES = True
    movement = make_movement("cex_to_cex", approve=True)
    run_node(movement, "withdraw", NS.COMPLETED)
    run_node(movement, "withdraw_observe", NS.COMPLETED)
    movement = run_node(movement, "deposit_observe", NS.FAILED)
    client = logged_in(client, sup1)
    post_action(client, movement, "force_complete", {"reason": "on the statement"})

    page = client.get(reverse("admin:movements_overrideproposal_changelist")).content.decode()

    assert change_url(movement) in page
    assert "PROPOSED" in page

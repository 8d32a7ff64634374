"""Two-person overrides: proposed by one supervisor, confirmed by another before the proposal
expires; both steps are events; the same person confirming is refused."""

from datetime import timedelta

import pytest
from django.utils import timezone

from movements.models import MovementEvent, OverrideAction, OverrideProposal, OverrideStatus
from movements.services import (
    intervention_force_complete,
    intervention_force_fail,
    movement_cancel,
    node_resolve_unknown,
    set_request_state,
)
from movements.services.overrides import override_confirm, override_propose
from movements.states import NodeState as NS
from movements.states import RequestState as RS
from qtg.core.errors import ActionRefused, NotPermitted
from tests.api.conftest import client_for, movement_url, post_json
from tests.approvals.conftest import act
from tests.movements.drive import WORKER, node, run_node

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def two_person(settings):
    settings.QTG_TWO_PERSON_OVERRIDES = True


@pytest.fixture
def intervention(make_movement):
    """Money left the source exchange and the deposit observation failed."""
    request = make_movement("cex_to_cex", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)
    run_node(request, "withdraw_observe", NS.COMPLETED)
    request = run_node(request, "deposit_observe", NS.FAILED)
    assert request.request_state == RS.MANUAL_INTERVENTION
    return request


def records(movement, key: str) -> list[MovementEvent]:
    return [
        e
        for e in movement.events.filter(kind=MovementEvent.Kind.RECORD).order_by("id")
        if key in e.detail
    ]


@pytest.mark.parametrize(
    "service",
    [intervention_force_complete, intervention_force_fail],
    ids=["force-complete", "force-fail"],
)
def test_one_supervisor_alone_cannot_force(intervention, carol, service):
    with pytest.raises(ActionRefused, match="two-person rule"):
        service(request=intervention, actor=act(carol), reason="checked the venue")

    intervention.refresh_from_db()
    assert intervention.request_state == RS.MANUAL_INTERVENTION


def test_force_complete_proposed_by_one_and_confirmed_by_another(intervention, carol, dave):
    proposal = override_propose(
        request=intervention,
        action=OverrideAction.FORCE_COMPLETE,
        actor=act(carol),
        reason="the deposit is on the venue's statement",
    )
    intervention.refresh_from_db()
    assert intervention.request_state == RS.MANUAL_INTERVENTION

    override_confirm(proposal=proposal, actor=act(dave), reason="checked with the venue")

    intervention.refresh_from_db()
    assert intervention.request_state == RS.COMPLETED
    proposal.refresh_from_db()
    assert (proposal.status, proposal.confirmed_by) == (OverrideStatus.CONFIRMED, dave)
    [proposed] = records(intervention, "override_proposed")
    [confirmed] = records(intervention, "override_confirmed")
    assert proposed.actor_id == str(carol.pk)
    assert confirmed.actor_id == str(dave.pk)
    assert confirmed.detail["proposed_by"] == "carol"
    completed = intervention.events.get(new_state=RS.COMPLETED, node__isnull=True)
    assert completed.actor_id == str(dave.pk) and completed.detail["forced"] is True


def test_the_proposer_cannot_confirm_their_own_proposal(intervention, carol):
    proposal = override_propose(
        request=intervention, action=OverrideAction.FORCE_FAIL, actor=act(carol), reason="r"
    )

    with pytest.raises(NotPermitted, match="another supervisor"):
        override_confirm(proposal=proposal, actor=act(carol), reason="checked with the venue")

    intervention.refresh_from_db()
    assert intervention.request_state == RS.MANUAL_INTERVENTION
    assert not records(intervention, "override_confirmed")


def test_an_expired_proposal_cannot_be_confirmed(intervention, carol, dave):
    proposal = override_propose(
        request=intervention, action=OverrideAction.FORCE_FAIL, actor=act(carol), reason="r"
    )
    OverrideProposal.objects.filter(pk=proposal.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    with pytest.raises(ActionRefused, match="expired"):
        override_confirm(proposal=proposal, actor=act(dave), reason="checked with the venue")

    intervention.refresh_from_db()
    assert intervention.request_state == RS.MANUAL_INTERVENTION


def test_a_proposal_is_confirmed_once(intervention, carol, dave, alice):
    proposal = override_propose(
        request=intervention, action=OverrideAction.FORCE_FAIL, actor=act(carol), reason="r"
    )
    override_confirm(proposal=proposal, actor=act(dave), reason="checked with the venue")

    with pytest.raises(ActionRefused, match="CONFIRMED"):
        override_confirm(proposal=proposal, actor=act(alice), reason="checked with the venue")


def test_an_override_the_movement_no_longer_allows_is_refused_at_confirmation(
    intervention, carol, dave
):
    proposal = override_propose(
        request=intervention, action=OverrideAction.FORCE_COMPLETE, actor=act(carol), reason="r"
    )
    second = override_propose(
        request=intervention, action=OverrideAction.FORCE_FAIL, actor=act(carol), reason="r"
    )
    override_confirm(proposal=second, actor=act(dave), reason="checked with the venue")

    with pytest.raises(ActionRefused, match="FAILED"):
        override_confirm(proposal=proposal, actor=act(dave), reason="checked with the venue")

    intervention.refresh_from_db()
    assert intervention.request_state == RS.FAILED


def test_a_proposal_is_refused_when_the_action_is_not_allowed_now(make_movement, carol):
    pending = make_movement()

    with pytest.raises(ActionRefused, match="PENDING_APPROVAL"):
        override_propose(
            request=pending, action=OverrideAction.FORCE_FAIL, actor=act(carol), reason="r"
        )
    assert not OverrideProposal.objects.exists()


@pytest.fixture
def in_transit(make_movement):
    """The withdrawal completed; the rest has not started (nothing in flight)."""
    request = make_movement("cex_to_cex", approve=True)
    request = run_node(request, "withdraw", NS.COMPLETED)
    assert request.request_state == RS.EXECUTING
    return request


def test_cancelling_with_funds_in_transit_needs_a_second_supervisor(in_transit, carol, dave):
    with pytest.raises(ActionRefused, match="two-person rule"):
        movement_cancel(
            request=in_transit,
            actor=act(carol),
            reason="stop",
            acknowledge_funds_in_transit=True,
        )

    proposal = override_propose(
        request=in_transit,
        action=OverrideAction.CANCEL_IN_TRANSIT,
        actor=act(carol),
        reason="the venue holds the funds; settle by hand",
    )
    override_confirm(proposal=proposal, actor=act(dave), reason="checked with the venue")

    in_transit.refresh_from_db()
    assert in_transit.request_state == RS.CANCELLED
    assert records(in_transit, "cancelled_with_funds_in_transit")


def test_a_cancel_before_any_side_effect_needs_no_second_person(make_movement, carol):
    request = make_movement("cex_to_cex", approve=True)
    set_request_state(request=request, new_state=RS.EXECUTING, actor=WORKER)  # dispatched
    movement_cancel(request=request, actor=act(carol), reason="changed our mind")

    request.refresh_from_db()
    assert request.request_state == RS.CANCELLED


def test_resolving_unknown_as_never_happened_needs_a_second_supervisor(make_movement, carol, dave):
    request = make_movement("cex_to_cex", approve=True)
    request = run_node(request, "withdraw", NS.UNKNOWN)
    with pytest.raises(ActionRefused, match="two-person rule"):
        node_resolve_unknown(
            request=request,
            node_key="withdraw",
            outcome=NS.FAILED,
            evidence="the venue has no such withdrawal",
            actor=act(carol),
        )

    proposal = override_propose(
        request=request,
        action=OverrideAction.RESOLVE_NEVER_HAPPENED,
        node_key="withdraw",
        evidence="the venue has no such withdrawal",
        actor=act(carol),
        reason="never happened",
    )
    override_confirm(proposal=proposal, actor=act(dave), reason="checked with the venue")

    assert node(request, "withdraw").node_state == NS.FAILED
    request.refresh_from_db()
    assert request.request_state == RS.FAILED


def test_resolving_unknown_as_completed_stays_a_one_person_action(make_movement, carol):
    request = make_movement("cex_to_cex", approve=True)
    request = run_node(request, "withdraw", NS.UNKNOWN)

    node_resolve_unknown(
        request=request,
        node_key="withdraw",
        outcome=NS.COMPLETED,
        evidence="on the venue's statement",
        external_ref="wd-1",
        actor=act(carol),
    )

    assert node(request, "withdraw").node_state == NS.COMPLETED


def test_the_api_refuses_a_cancel_in_transit_under_the_two_person_rule(in_transit, carol):
    response = post_json(
        client_for(carol),
        movement_url(in_transit.pk, "cancel"),
        {"reason": "stop", "acknowledge_funds_in_transit": True},
    )

    assert response.status_code == 409
    assert response.json()["code"] == "two_person_required"
    in_transit.refresh_from_db()
    assert in_transit.request_state == RS.EXECUTING


def test_a_proposal_and_its_confirmation_are_linked_records_naming_both_people(
    intervention, carol, dave
):
    from movements.models import AuditRecord
    from qtg.core.chain import link_problem

    proposal = override_propose(
        request=intervention, action=OverrideAction.FORCE_FAIL, actor=act(carol), reason="gone"
    )
    override_confirm(proposal=proposal, actor=act(dave), reason="checked with the venue")

    rows = list(
        AuditRecord.objects.filter(subject=f"movements.overrideproposal:{proposal.pk}").order_by(
            "pk"
        )
    )
    assert [(r.action, r.actor_id, r.detail["status"]) for r in rows] == [
        ("proposed", "user:carol", "PROPOSED"),
        ("confirmed", "user:dave", "CONFIRMED"),
    ]
    assert rows[1].detail["reason"] == "gone"
    assert all(link_problem(r) is None for r in rows)
    assert rows[1].chain_prev == rows[0].chain_hash

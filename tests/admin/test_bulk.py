"""Bulk approve and reject from the list, behind a confirmation page with totals per asset."""

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from movements.states import RequestState
from tests.admin.conftest import snapshot
from tests.admin.helpers import changelist_url, messages_of


def choose(client, action: str, movements, **extra):
    data = {"action": action, "index": 0, ACTION_CHECKBOX_NAME: [str(m.pk) for m in movements]}
    return client.post(changelist_url(), {**data, **extra})


def confirm(client, action: str, movements, **extra):
    data = {"action": action, "post": "yes", ACTION_CHECKBOX_NAME: [str(m.pk) for m in movements]}
    return client.post(changelist_url(), {**data, **extra})


def test_bulk_approve_shows_the_total_per_asset_and_what_will_be_skipped(
    client, op, make_movement, executing
):
    # given two USDC and one ETH movement to approve, one of the operator's own, one running
    usdc = [make_movement(amount="1000.50"), make_movement(amount="250")]
    eth = make_movement(asset="ETH", amount="1.25")
    own = make_movement(by=op, amount="999")
    busy = executing()
    chosen = [*usdc, eth, own, busy]
    before = [snapshot(m) for m in chosen]
    client.force_login(op)

    # when the operator picks "approve selected"
    response = choose(client, "approve_selected", chosen)

    # then a confirmation page shows the totals of what can be approved, and what cannot
    assert response.status_code == 200
    assert response.context["totals"] == [
        ("ETH", "1.250000000000000000"),
        ("USDC", "1,250.500000"),
    ]
    html = response.content.decode()
    assert 'data-asset="USDC">1,250.500000<' in html
    assert "four-eyes: you created it" in html
    assert "it is EXECUTING" in html
    assert 'name="post" value="yes"' in html
    assert [snapshot(m) for m in chosen] == before


def test_confirming_bulk_approve_approves_the_eligible_and_reports_the_refused(
    client, op, make_movement
):
    pending = [make_movement(), make_movement(asset="ETH", amount="2")]
    own = make_movement(by=op)
    client.force_login(op)

    response = confirm(client, "approve_selected", [*pending, own])

    for movement in pending:
        movement.refresh_from_db()
        assert movement.request_state == RequestState.APPROVED
        assert movement.approved_by == op
    own.refresh_from_db()
    assert own.request_state == RequestState.PENDING_APPROVAL
    shown = messages_of(response)
    assert "Approved 2 movement(s)." in shown
    assert any("1 refused" in m and "four-eyes" in m for m in shown)


def test_bulk_reject_asks_for_a_reason_and_rejects_with_it(client, op, make_movement):
    movements = [make_movement(), make_movement()]
    before = [snapshot(m) for m in movements]
    client.force_login(op)

    page = choose(client, "reject_selected", movements)
    assert b'name="reason"' in page.content

    missing = confirm(client, "reject_selected", movements, reason="")
    assert missing.status_code == 200
    assert b"This field is required" in missing.content
    assert [snapshot(m) for m in movements] == before

    confirm(client, "reject_selected", movements, reason="duplicates of #41")
    for movement in movements:
        movement.refresh_from_db()
        assert movement.request_state == RequestState.REJECTED
        assert movement.failure_reason == "duplicates of #41"


def test_a_repeated_bulk_confirmation_acts_once(client, op, make_movement):
    movements = [make_movement(), make_movement()]
    client.force_login(op)
    confirm(client, "approve_selected", movements)
    after_first = [snapshot(m) for m in movements]

    response = confirm(client, "approve_selected", movements)

    assert [snapshot(m) for m in movements] == after_first
    assert any("2 refused" in m for m in messages_of(response))


def test_bulk_actions_are_offered_only_with_their_permission(client, viewer, op, make_movement):
    make_movement()

    client.force_login(op)
    offered = dict(client.get(changelist_url()).context["action_form"].fields["action"].choices)
    assert {"approve_selected", "reject_selected"} <= offered.keys()

    client.force_login(viewer)
    response = client.get(changelist_url())
    assert (
        response.context["action_form"] is None
        or not {"approve_selected", "reject_selected"}
        & dict(response.context["action_form"].fields["action"].choices).keys()
    )


def test_a_viewer_posting_bulk_approve_changes_nothing(client, viewer, make_movement):
    movement = make_movement()
    before = snapshot(movement)
    client.force_login(viewer)

    confirm(client, "approve_selected", [movement])

    assert snapshot(movement) == before

"""The movement list: what it shows, its filters and search, and its cost per page."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from movements.models import MovementRequest, MovementRequestNode
from movements.states import RequestState
from tests.admin.helpers import changelist_url


def listed_ids(response) -> set[str]:
    return {str(obj.pk) for obj in response.context["cl"].result_list}


def test_the_list_shows_state_badge_amount_template_creator_age_and_frontier(
    client, op, make_movement
):
    # given an approved movement whose withdrawal is on the frontier
    make_movement(approve=True, amount="1234.50")
    client.force_login(op)

    # when the operator opens the list
    html = client.get(changelist_url()).content.decode()

    # then its row shows all of it
    assert 'class="qtg-badge"' in html and "APPROVED" in html
    assert "1,234.5" in html
    assert "cex_to_cex" in html and "USDC" in html
    assert ">creator<" in html
    assert "0\xa0minutes" in html
    assert 'class="field-frontier">withdraw<' in html


def test_needs_me_lists_only_what_waits_for_an_operator(
    client, op, make_movement, waiting_at_gate, intervention_failed, executing
):
    # given movements in every kind of state
    pending = make_movement()
    gate = waiting_at_gate()
    trouble = intervention_failed()
    busy = executing()
    client.force_login(op)

    # when the operator clicks "needs me"
    response = client.get(changelist_url() + "?state=needs_me")

    # then they see the pending, the waiting and the troubled ones, not the busy one
    assert listed_ids(response) == {str(pending.pk), str(gate.pk), str(trouble.pk)}
    assert str(busy.pk) not in listed_ids(response)
    assert b"Needs me: 3" in response.content


def test_the_state_filter_selects_one_state(client, op, make_movement, executing):
    make_movement()
    busy = executing()
    client.force_login(op)

    response = client.get(changelist_url() + f"?state={RequestState.EXECUTING}")

    assert listed_ids(response) == {str(busy.pk)}


def test_filters_by_template_and_asset(client, op, make_movement):
    usdc = make_movement()
    eth = make_movement(asset="ETH")
    gated = make_movement("cex_to_cex_gated")
    client.force_login(op)

    by_asset = client.get(changelist_url() + "?asset=ETH")
    by_template = client.get(changelist_url() + "?template_key=cex_to_cex_gated")

    assert listed_ids(by_asset) == {str(eth.pk)}
    assert listed_ids(by_template) == {str(gated.pk)}
    assert str(usdc.pk) not in listed_ids(by_template)


def _age(movement: MovementRequest, days: int) -> None:
    # The creation time is history the services write once; tests move it back directly.
    MovementRequest.objects.filter(pk=movement.pk).update(
        created_at=timezone.now() - timedelta(days=days)
    )


def test_the_date_range_filter_keeps_movements_created_between_two_days(client, op, make_movement):
    old, recent, today = make_movement(), make_movement(), make_movement()
    _age(old, 30)
    _age(recent, 3)
    client.force_login(op)
    start = (timezone.now() - timedelta(days=5)).date().isoformat()
    end = (timezone.now() - timedelta(days=1)).date().isoformat()

    response = client.get(changelist_url() + f"?created_from={start}&created_to={end}")

    assert listed_ids(response) == {str(recent.pk)}
    assert str(today.pk) not in listed_ids(response)


def test_the_date_range_form_keeps_the_other_filters(client, op, make_movement):
    make_movement()
    client.force_login(op)

    html = client.get(changelist_url() + "?asset=USDC&state=needs_me").content.decode()

    assert '<input type="hidden" name="asset" value="USDC">' in html
    assert '<input type="hidden" name="state" value="needs_me">' in html


@pytest.mark.parametrize("how", ["full id", "short id", "idempotency key", "external ref"])
def test_search_finds_a_movement_by_id_key_or_external_reference(
    client, op, make_movement, executing, how
):
    # given a movement with an idempotency key and a withdrawal id on its first node
    target = executing(idempotency_key="client-key-42")
    make_movement()
    with transaction.atomic():
        node = MovementRequestNode.objects.select_for_update().get(
            request=target, node_key="withdraw"
        )
        node.external_ref = "WD-778899"
        node.save(update_fields=["external_ref"])
    term = {
        "full id": str(target.pk),
        "short id": target.short_id,
        "idempotency key": "client-key-42",
        "external ref": "WD-778899",
    }[how]
    client.force_login(op)

    response = client.get(changelist_url(), {"q": term})

    assert listed_ids(response) == {str(target.pk)}


def test_a_search_that_matches_nothing_lists_nothing(client, op, make_movement):
    make_movement()
    client.force_login(op)

    assert listed_ids(client.get(changelist_url(), {"q": "no-such-thing"})) == set()


def test_row_actions_are_only_those_legal_now_and_permitted(
    client, op, viewer, make_movement, executing
):
    # given a pending and an executing movement
    pending, busy = make_movement(), executing()

    # when an operator lists them, then each row offers what is legal for it
    client.force_login(op)
    html = client.get(changelist_url()).content.decode()
    assert f"{pending.pk}/action/approve/" in html
    assert f"{pending.pk}/action/reject/" in html
    assert f"{busy.pk}/action/cancel/" in html
    assert f"{busy.pk}/action/approve/" not in html
    assert f"{pending.pk}/action/cancel/" not in html

    # and staff without action permissions are offered nothing
    client.force_login(viewer)
    assert "/action/" not in client.get(changelist_url()).content.decode()


def test_staff_without_view_permission_cannot_see_the_list(client, make_movement):
    from tests.conftest import make_user

    make_movement()
    client.force_login(make_user("otto", is_staff=True))

    assert client.get(changelist_url()).status_code == 403


def _queries_for_a_page(client, rows: int, make_movement) -> int:
    while MovementRequest.objects.count() < rows:
        make_movement()
    with CaptureQueriesContext(connection) as captured:
        response = client.get(changelist_url())
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == rows
    return len(captured)


def test_the_number_of_queries_does_not_grow_with_the_rows_on_the_page(
    client, op, make_movement, executing, intervention_failed
):
    # given a page of 5 movements in different states, then a page of 50
    executing()
    intervention_failed()
    client.force_login(op)
    client.get(changelist_url())  # warm the session and the content types
    five = _queries_for_a_page(client, 5, make_movement)

    # when the page holds ten times as many rows
    fifty = _queries_for_a_page(client, 50, make_movement)

    # then it costs exactly the same number of queries
    assert fifty == five, f"{five} queries for 5 rows but {fifty} for 50"
    # (the venue and creator filters read their choices once per page, and "needs me" is
    # counted as two indexed counts: three more than before those existed)
    assert five <= 18


@pytest.mark.parametrize("query", ["created_to=9999-12-31", "created_from=9999-12-31"])
def test_a_date_range_at_the_end_of_the_calendar_lists_instead_of_failing(
    client, op, make_movement, query
):
    movement = make_movement()
    client.force_login(op)

    response = client.get(changelist_url() + f"?{query}")

    assert response.status_code == 200
    expected = {str(movement.pk)} if query.startswith("created_to") else set()
    assert listed_ids(response) == expected

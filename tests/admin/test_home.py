"""The console's home page: my queue, money by asset and venue, what is UNKNOWN or stuck,
failing webhooks; each figure checked against the database, read here another way."""

import re
from datetime import timedelta
from decimal import Decimal
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from callbacks.models import Subscription
from callbacks.services import delivery_send, subscription_save, subscription_send_test
from movements import policies
from movements.admin.filters import needs_me_q
from movements.models import (
    MovementAttention,
    MovementRequest,
    MovementRequestNode,
    OverrideAction,
)
from movements.permissions import SUPERVISORS
from movements.selectors import current_nodes
from movements.services.attention import detect_stuck_nodes
from movements.services.overrides import override_propose
from movements.states import NodeState, RequestState
from qtg.core import money
from qtg.core.actors import Actor
from reservations.models import Reservation, ReservationState
from tests.admin.conftest import TO_COMPLETED, drive, staff_user

HOME = "/admin/"


def home_html(client, user, url=HOME) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def queue_pks(html: str) -> list[tuple[str, str]]:
    section = html[html.index('id="qtg-queue"') : html.index('id="qtg-money"')]
    return re.findall(r'<tr data-kind="(\w+)" data-pk="([^"]+)">', section)


def money_cells(html: str, asset: str, venue: str) -> list[str]:
    row = re.search(
        rf'<tr data-asset="{asset}" data-venue="{re.escape(venue)}">(.*?)</tr>', html, re.S
    )
    assert row, f"no money row for {asset} at {venue}"
    return [unescape(c) for c in re.findall(r'<td class="num">([^<]*)</td>', row.group(1))]


@pytest.fixture
def floor(op, supervisor, make_movement, executing, waiting_at_gate, intervention_failed):
    """One movement in each place money can be: awaiting approval, running with nothing gone,
    gone from the exchange (waiting at a gate), held in MANUAL_INTERVENTION."""
    return {
        "pending": make_movement(amount="2500.00"),
        "running": executing(amount="40.50"),
        "gate": waiting_at_gate(amount="300.00"),
        "stuck": intervention_failed(amount="640.00"),
    }


def test_the_home_page_replaces_the_stock_index(client, op, floor):
    html = home_html(client, op)

    assert "My queue" in html and "Money held, by asset and venue" in html
    assert "Recent actions" not in html
    # the sidebar of every page is there: the app list still leads everywhere
    assert reverse("admin:movements_movementrequest_changelist") in html


def test_an_operators_queue_holds_what_they_can_act_on_oldest_first(client, op, floor):
    # given the operator's own movement awaiting approval (four-eyes: not theirs to approve)
    mine = MovementRequest.objects.get(pk=floor["pending"].pk)
    MovementRequest.objects.filter(pk=mine.pk).update(created_by=op)

    pks = queue_pks(home_html(client, op))

    # then: the gate (operators resume gates), not their own movement, not MANUAL_INTERVENTION
    assert pks == [("movement", str(floor["gate"].pk))]


def test_a_supervisors_queue_has_the_intervention_the_approval_and_a_proposal_to_confirm(
    client, supervisor, floor, settings
):
    settings.QTG_TWO_PERSON_OVERRIDES = True
    other = staff_user("sue", SUPERVISORS)
    proposal = override_propose(
        request=floor["stuck"],
        action=OverrideAction.FORCE_FAIL,
        actor=Actor.for_user(other),
        reason="the desk says it came back",
    )

    html = home_html(client, supervisor)
    pks = queue_pks(html)

    assert ("proposal", str(proposal.pk)) in pks
    assert ("movement", str(floor["stuck"].pk)) in pks
    assert ("movement", str(floor["pending"].pk)) in pks
    assert reverse("admin:movements_overrideproposal_confirm", args=[proposal.pk]) in html
    # oldest first, by what each has been waiting since
    whens = [
        MovementRequest.objects.get(pk=pk).state_changed_at
        for kind, pk in pks
        if kind == "movement"
    ]
    assert whens == sorted(whens)
    # and the proposer is not asked to confirm their own proposal
    assert ("proposal", str(proposal.pk)) not in queue_pks(home_html(client, other))


def expected_money() -> dict[tuple[str, str], list[Decimal]]:
    """The held reservations classified one by one from each movement's live nodes."""
    result: dict[tuple[str, str], list[Decimal]] = {}
    for reservation in Reservation.objects.filter(state=ReservationState.HELD):
        movement = reservation.request
        left = policies.funds_in_transit(current_nodes(movement))
        if movement.request_state == RequestState.PENDING_APPROVAL:
            column = 0
        elif movement.request_state == RequestState.MANUAL_INTERVENTION:
            column = 3
        elif left:
            column = 2
        else:
            column = 1
        cells = result.setdefault((reservation.asset, reservation.source), [Decimal(0)] * 4)
        cells[column] += reservation.amount
    return result


def test_money_is_split_by_where_it_is_and_matches_the_reservations(client, op, floor):
    expected = expected_money()
    html = home_html(client, op)

    for (asset, venue), amounts in expected.items():
        shown = money_cells(html, asset, venue)
        assert shown == [money.display_amount(a, asset) if a else "—" for a in amounts]
    # the figures of the floor, by hand: 2,500 awaiting, 40.5 running, 300 gone, 640 held
    assert money_cells(html, "USDC", "sandbox-exchange-a") == [
        "2,500.000000",
        "40.500000",
        "300.000000",
        "640.000000",
    ]


def test_unknown_and_stuck_counts_match_the_nodes(client, op, floor, intervention_unknown):
    intervention_unknown(amount="12.00")

    html = home_html(client, op)

    unknown = MovementRequestNode.objects.current().filter(node_state=NodeState.UNKNOWN).count()
    assert unknown == 1
    assert re.search(rf'id="qtg-unknown"><b>{unknown}</b>', html)
    waiting = MovementRequest.objects.filter(
        request_state__in=[
            RequestState.PENDING_APPROVAL,
            RequestState.WAITING_MANUAL_ACTION,
            RequestState.MANUAL_INTERVENTION,
        ]
    ).count()
    assert re.search(rf'id="qtg-needs-someone"><b><a [^>]*>{waiting}</a>', html)


def test_a_subscription_whose_deliveries_died_is_listed(client, op, settings, db):
    settings.QTG_CALLBACKS_MAX_ATTEMPTS = 1
    subscription = subscription_save(
        subscription=Subscription(
            name="ledger", url="http://127.0.0.1:9/hook", event_types=["request_completed"]
        ),
        actor=Actor.system("tests"),
    )
    delivery = subscription_send_test(subscription=subscription)
    delivery_send(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "DEAD"

    html = home_html(client, op)

    section = html[html.index('id="qtg-webhooks"') : html.index('id="qtg-venues"')]
    assert f'data-subscription="{subscription.pk}"' in section and "ledger" in section


def test_the_live_part_is_served_alone_for_the_page_to_swap_in(client, op, floor):
    html = home_html(client, op, url=reverse("qtg-home-live"))

    assert 'id="qtg-queue"' in html
    assert "<html" not in html and 'id="header"' not in html


def test_a_stuck_movement_counts_as_stuck_by_reason_and_as_waiting_for_a_person(
    client, supervisor, floor, executing
):
    # given a movement whose deposit observation has been running far longer than expected
    movement = drive(executing(), "withdraw", *TO_COMPLETED)
    drive(movement, "withdraw_observe", "OBSERVING", "COMPLETED")
    drive(movement, "deposit_observe", "OBSERVING")
    assert detect_stuck_nodes(now=timezone.now() + timedelta(days=1)) == 1

    html = home_html(client, supervisor)

    # then the tiles and the reasons agree with the attention rows and with the list's filter
    open_stuck = MovementAttention.objects.filter(resolved_at__isnull=True, reason="stuck")
    assert re.search(rf'id="qtg-stuck"><b>{open_stuck.count()}</b>', html)
    assert re.search(r'<tr data-reason="stuck"><td>[^<]+</td><td class="num">1</td>', html)
    listed = MovementRequest.objects.filter(needs_me_q()).count()
    assert listed == 4  # pending, gate, intervention, and the stuck one
    assert re.search(rf'id="qtg-needs-someone"><b><a [^>]*>{listed}</a>', html)
    # and a supervisor's queue has it (they may handle the attention)
    assert ("movement", str(movement.pk)) in queue_pks(html)

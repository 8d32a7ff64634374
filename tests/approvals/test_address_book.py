"""The address book: four-eyes to add, a cool-down before first use, checked at create and
again at dispatch."""

from datetime import timedelta

import pytest
from django.utils import timezone

from movements.models import AddressBookEntry, EntryStatus
from movements.services import movement_approve
from movements.services.address_book import (
    address_approve,
    address_propose,
    address_reject,
    address_remove,
)
from movements.services.execution.claims import claim_ready_nodes
from movements.states import NodeState, RequestState
from qtg.core.errors import ActionRefused, NotPermitted
from tests.approvals.conftest import act
from tests.movements.drive import node

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def enforced(settings):
    settings.QTG_ADDRESS_BOOK_ENFORCED = True
    settings.QTG_ADDRESS_COOLDOWN = timedelta(0)


@pytest.fixture
def vetted(alice, carol):
    """sandbox-exchange-b vetted for USDC on ethereum (the cex_to_cex default network)."""
    entry = address_propose(
        actor=act(alice),
        asset="USDC",
        network="ethereum",
        address="sandbox-exchange-b",
        label="Exchange B",
    )
    return address_approve(entry=entry, actor=act(carol))


def test_a_destination_not_in_the_book_is_refused_at_create(make_movement):
    movement = make_movement()

    assert movement.request_state == RequestState.FAILED
    assert movement.failure_reason.startswith("destination not allowlisted")
    failed = movement.events.get(new_state=RequestState.FAILED)
    assert failed.old_state == RequestState.RECEIVED
    assert failed.detail["code"] == "destination_not_allowlisted"


def test_a_vetted_destination_is_accepted(make_movement, vetted):
    assert make_movement().request_state == RequestState.PENDING_APPROVAL


def test_the_book_is_per_asset_and_network(make_movement, vetted):
    assert make_movement(asset="USDT").request_state == RequestState.FAILED
    other_network = make_movement(params={"network": "tron"})
    assert other_network.request_state == RequestState.FAILED


def test_a_proposed_entry_is_not_in_the_book_until_someone_else_approves_it(make_movement, alice):
    entry = address_propose(
        actor=act(alice), asset="USDC", network="ethereum", address="sandbox-exchange-b", label="B"
    )
    assert make_movement().request_state == RequestState.FAILED

    with pytest.raises(NotPermitted, match="four-eyes"):
        address_approve(entry=entry, actor=act(alice))


def test_a_rejected_entry_stays_out_of_the_book(make_movement, alice, carol):
    entry = address_propose(
        actor=act(alice), asset="USDC", network="ethereum", address="sandbox-exchange-b", label="B"
    )
    address_reject(entry=entry, actor=act(carol))

    assert make_movement().request_state == RequestState.FAILED


def test_an_address_is_in_the_book_once(vetted, alice):
    with pytest.raises(ActionRefused, match="already in the book"):
        address_propose(
            actor=act(alice),
            asset="USDC",
            network="ethereum",
            address="sandbox-exchange-b",
            label="again",
        )


def test_an_address_removed_after_create_fails_the_node_at_dispatch(
    make_movement, vetted, bob, carol
):
    movement = make_movement()
    movement_approve(request=movement, actor=act(bob))
    address_remove(entry=vetted, actor=act(carol))

    assert claim_ready_nodes(owner="test") == []

    withdraw = node(movement, "withdraw")
    assert withdraw.node_state == NodeState.FAILED
    assert withdraw.last_error.startswith("destination not allowlisted")
    event = withdraw.events.get(new_state=NodeState.FAILED)
    assert event.old_state == NodeState.READY
    movement.refresh_from_db()
    assert movement.request_state == RequestState.FAILED


def test_a_new_address_waits_for_its_cool_down_before_first_use(
    settings, make_movement, alice, bob, carol
):
    settings.QTG_ADDRESS_COOLDOWN = timedelta(hours=1)
    entry = address_approve(
        entry=address_propose(
            actor=act(alice),
            asset="USDC",
            network="ethereum",
            address="sandbox-exchange-b",
            label="B",
        ),
        actor=act(carol),
    )
    assert entry.usable_from > timezone.now() + timedelta(minutes=59)
    movement = make_movement()
    movement_approve(request=movement, actor=act(bob))

    assert claim_ready_nodes(owner="test") == []

    withdraw = node(movement, "withdraw")
    assert withdraw.node_state == NodeState.READY
    assert withdraw.next_attempt_at == entry.usable_from
    waiting = movement.events.get(detail__waiting__isnull=False)
    assert "cool-down" in waiting.detail["waiting"]

    AddressBookEntry.objects.filter(pk=entry.pk).update(usable_from=timezone.now())
    claims = claim_ready_nodes(owner="test", as_of=timezone.now() + timedelta(hours=1))

    assert [c.node.node_key for c in claims] == ["withdraw"]


def test_the_book_is_not_consulted_when_not_enforced(settings, make_movement):
    settings.QTG_ADDRESS_BOOK_ENFORCED = False

    assert make_movement().request_state == RequestState.PENDING_APPROVAL
    assert not AddressBookEntry.objects.filter(status=EntryStatus.ACTIVE).exists()

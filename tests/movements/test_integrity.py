"""State can change only through a transition; the audit trail is append-only; concurrent
writers never silently overwrite each other."""

import threading

import pytest
from django.db import connection, transaction

from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.services import movement_approve, set_node_state
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import ActionRefused, StaleState
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def test_the_state_fields_cannot_be_assigned(make_movement):
    request = make_movement()

    with pytest.raises(AttributeError):
        request.request_state = RequestState.COMPLETED
    with pytest.raises(AttributeError):
        request.nodes.first().node_state = NodeState.COMPLETED


def test_events_cannot_be_edited_or_deleted(make_movement):
    request = make_movement()
    event = request.events.first()

    event.detail = {"rewritten": True}
    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        event.delete()
    with pytest.raises(TypeError):
        MovementEvent.objects.filter(request=request).update(actor_id="someone")
    with pytest.raises(TypeError):
        MovementEvent.objects.filter(request=request).delete()


def test_a_stale_copy_of_a_node_cannot_overwrite_a_newer_state(make_movement, system):
    request = make_movement(approve=True)
    fresh = MovementRequestNode.objects.get(request=request, node_key="withdraw")
    stale = MovementRequestNode.objects.get(pk=fresh.pk)
    set_node_state(node=fresh, new_state=NodeState.PREPARING, actor=system)
    events_before = MovementEvent.objects.count()

    with pytest.raises(StaleState), transaction.atomic():
        set_node_state(node=stale, new_state=NodeState.SKIPPED, actor=system)

    fresh.refresh_from_db()
    assert fresh.node_state == NodeState.PREPARING
    assert MovementEvent.objects.count() == events_before


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_approvals_by_many_operators_approve_exactly_once(make_movement):
    request = make_movement()
    approvers = [make_user(f"approver{i}", "approve_movement") for i in range(8)]
    barrier = threading.Barrier(len(approvers))
    outcomes: list[str] = []

    def approve(user):
        try:
            barrier.wait()
            movement_approve(request=request.pk, actor=Actor.for_user(user))
            outcomes.append("approved")
        except ActionRefused:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(u,)) for u in approvers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["approved"] + ["refused"] * (len(approvers) - 1)
    request = MovementRequest.objects.get(pk=request.pk)
    assert request.request_state == RequestState.APPROVED
    assert request.events.filter(new_state="APPROVED").count() == 1
    withdraw = request.nodes.get(node_key="withdraw")
    assert withdraw.events.filter(new_state="READY").count() == 1


def test_state_writers_accept_the_specs_actor_type_and_id(make_movement):
    request = make_movement(approve=True)
    withdraw = request.nodes.get(node_key="withdraw")

    event = set_node_state(withdraw, NodeState.PREPARING, actor_type="system", actor_id="recovery")

    assert (event.actor_type, event.actor_id) == ("system", "recovery")
    assert (event.old_state, event.new_state) == ("READY", "PREPARING")

"""Every (from, to) pair of both tables: allowed exactly when the table says so, through the
generated model methods and through set_request_state / set_node_state."""

import itertools

import pytest
from django_fsm import TransitionNotAllowed, can_proceed

from movements.fsm import transition_method_name
from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.services import set_node_state, set_request_state
from movements.states import (
    NODE_TRANSITIONS,
    REQUEST_TRANSITIONS,
    TERMINAL_NODE_STATES,
    TERMINAL_REQUEST_STATES,
    NodeState,
    RequestState,
    can_transition_node_state,
    can_transition_request_state,
)
from qtg.core.actors import Actor
from qtg.core.errors import IllegalStateTransition

REQUEST_PAIRS = list(itertools.product(RequestState, RequestState))
NODE_PAIRS = list(itertools.product(NodeState, NodeState))


def _edges(model, field: str) -> set[tuple[str, str]]:
    return {(t.source, t.target) for t in getattr(model(), f"get_all_{field}_transitions")()}


def test_the_request_tables_match_the_spec_with_no_extension():
    assert REQUEST_TRANSITIONS[RequestState.EXECUTING] == {
        RequestState.COMPLETED,
        RequestState.FAILED,
        RequestState.MANUAL_INTERVENTION,
        RequestState.WAITING_MANUAL_ACTION,
        RequestState.CANCELLED,
    }
    assert TERMINAL_REQUEST_STATES == {
        RequestState.COMPLETED,
        RequestState.FAILED,
        RequestState.REJECTED,
        RequestState.EXPIRED,
        RequestState.CANCELLED,
    }


def test_the_node_table_adds_only_the_documented_cancellation_edges():
    assert NODE_TRANSITIONS[NodeState.BLOCKED] == {
        NodeState.READY,
        NodeState.SKIPPED,
        NodeState.CANCELLED,
    }
    assert NodeState.CANCELLED in NODE_TRANSITIONS[NodeState.READY]
    into_cancelled = {
        s for s, targets in NODE_TRANSITIONS.items() if NodeState.CANCELLED in targets
    }
    assert into_cancelled == {NodeState.BLOCKED, NodeState.READY}
    assert TERMINAL_NODE_STATES == {
        NodeState.COMPLETED,
        NodeState.FAILED,
        NodeState.CANCELLED,
        NodeState.SKIPPED,
    }


def test_generated_request_methods_cover_the_table_edge_for_edge():
    table = {(s, t) for s, targets in REQUEST_TRANSITIONS.items() for t in targets}
    assert _edges(MovementRequest, "request_state") == table


def test_generated_node_methods_cover_the_table_edge_for_edge():
    table = {(s, t) for s, targets in NODE_TRANSITIONS.items() for t in targets}
    assert _edges(MovementRequestNode, "node_state") == table


def test_every_generated_method_has_its_own_qualname():
    methods = [t.qualname for t in MovementRequestNode().get_all_node_state_transitions()]
    per_method = {q for q in methods}
    targets = {t for targets in NODE_TRANSITIONS.values() for t in targets}
    assert len(per_method) == len(targets)


@pytest.mark.parametrize(("current", "target"), REQUEST_PAIRS)
def test_request_model_method_allows_exactly_the_table(current, target):
    request = MovementRequest(request_state=current)
    method = getattr(request, transition_method_name(target), None)
    allowed = target in REQUEST_TRANSITIONS[current]
    assert can_transition_request_state(current, target) is allowed
    if method is None:
        assert not allowed
        return
    assert can_proceed(method) is allowed
    if allowed:
        method()
        assert request.request_state == target
    else:
        with pytest.raises(TransitionNotAllowed):
            method()
        assert request.request_state == current


@pytest.mark.parametrize(("current", "target"), NODE_PAIRS)
def test_node_model_method_allows_exactly_the_table(current, target):
    node = MovementRequestNode(node_state=current)
    method = getattr(node, transition_method_name(target), None)
    allowed = target in NODE_TRANSITIONS[current]
    assert can_transition_node_state(current, target) is allowed
    if method is None:
        assert not allowed
        return
    assert can_proceed(method) is allowed
    if allowed:
        method()
        assert node.node_state == target
    else:
        with pytest.raises(TransitionNotAllowed):
            method()


def test_unknown_state_names_are_never_a_legal_transition():
    assert can_transition_request_state("RECEIVED", "BOGUS") is False
    assert can_transition_node_state("BOGUS", "READY") is False


@pytest.fixture
def blank_request(db, make_movement):
    return make_movement()


def _request_in(base: MovementRequest, state: RequestState) -> MovementRequest:
    # Test set-up only: a row born in an arbitrary state (creation is not a transition).
    return MovementRequest.objects.create(
        request_state=state,
        template_key=base.template_key,
        asset="USDC",
        amount="1",
        source="a",
        destination="b",
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("current", "target"), REQUEST_PAIRS)
def test_set_request_state_allows_exactly_the_table(blank_request, current, target):
    request = _request_in(blank_request, current)
    actor = Actor.system("tests")
    if target in REQUEST_TRANSITIONS[current]:
        event = set_request_state(request=request, new_state=target, actor=actor)
        request.refresh_from_db()
        assert request.request_state == target
        assert (event.old_state, event.new_state) == (current, target)
    else:
        with pytest.raises(IllegalStateTransition):
            set_request_state(request=request, new_state=target, actor=actor)
        request.refresh_from_db()
        assert request.request_state == current
        assert not MovementEvent.objects.filter(request=request).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("current", "target"), NODE_PAIRS)
def test_set_node_state_allows_exactly_the_table(blank_request, current, target):
    template = blank_request.nodes.first()
    node = MovementRequestNode.objects.create(
        request=blank_request,
        plan_node=template.plan_node,
        node_key="probe",
        kind=template.kind,
        executor=template.executor,
        node_state=current,
    )
    before = MovementEvent.objects.count()
    actor = Actor.system("tests")
    if target in NODE_TRANSITIONS[current]:
        set_node_state(node=node, new_state=target, actor=actor)
        node.refresh_from_db()
        assert node.node_state == target
        assert MovementEvent.objects.count() == before + 1
    else:
        with pytest.raises(IllegalStateTransition):
            set_node_state(node=node, new_state=target, actor=actor)
        node.refresh_from_db()
        assert node.node_state == current
        assert MovementEvent.objects.count() == before

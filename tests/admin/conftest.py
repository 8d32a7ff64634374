"""Fixtures of the operator console tests: operators, supervisors, and movements driven into
each state an operator acts on, through the real services."""

import pytest
from django.contrib.auth.models import Group, User
from django.db import transaction

from movements.models import MovementRequest
from movements.permissions import OPERATORS, SUPERVISORS, ensure_operator_groups
from movements.selectors import current_nodes
from movements.services import (
    advance_after_completion,
    apply_request_state_from_nodes,
    set_node_state,
    set_request_state,
)
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor

WORKER = Actor.system("tests-worker")
TO_COMPLETED = ("PREPARING", "SUBMITTING", "SUBMITTED", "COMPLETED")


def staff_user(username: str, *groups: str) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username, is_staff=True)
    user.groups.set(Group.objects.filter(name__in=groups))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def groups(db):
    return ensure_operator_groups()


@pytest.fixture
def op(groups) -> User:
    """An operator: approve, reject, resume a manual gate, cancel."""
    return staff_user("olga", OPERATORS)


@pytest.fixture
def supervisor(groups) -> User:
    """A supervisor: everything an operator does, plus the ways out of MANUAL_INTERVENTION."""
    return staff_user("sam", SUPERVISORS)


@pytest.fixture
def viewer(db) -> User:
    """Staff who may look at movements but holds no action permission."""
    from tests.conftest import make_user

    user = make_user("vic", "view_movementrequest", is_staff=True)
    return user


def drive(request: MovementRequest, node_key: str, *states: str) -> MovementRequest:
    """Walk one node through ``states`` as a worker would, then let the request follow."""
    with transaction.atomic():
        request = MovementRequest.objects.select_for_update().get(pk=request.pk)
        if request.request_state == RequestState.APPROVED:
            set_request_state(request=request, new_state=RequestState.EXECUTING, actor=WORKER)
        nodes = current_nodes(request, lock=True)
        node = next(n for n in nodes if n.node_key == node_key)
        for state in states:
            set_node_state(node=node, new_state=state, actor=WORKER)
        if node.node_state == NodeState.COMPLETED:
            advance_after_completion(request, node, actor=WORKER, nodes=nodes)
        else:
            apply_request_state_from_nodes(request, actor=WORKER, nodes=nodes)
    request.refresh_from_db()
    return request


@pytest.fixture
def executing(make_movement):
    """cex_to_cex, approved, its withdrawal READY and the request EXECUTING (cancellable)."""

    def _make(**kwargs):
        request = make_movement(approve=True, **kwargs)
        with transaction.atomic():
            locked = MovementRequest.objects.select_for_update().get(pk=request.pk)
            set_request_state(request=locked, new_state=RequestState.EXECUTING, actor=WORKER)
        request.refresh_from_db()
        return request

    return _make


@pytest.fixture
def waiting_at_gate(make_movement):
    """cex_to_cex_gated with the withdrawal done: WAITING_MANUAL_ACTION at manual_release."""

    def _make(**kwargs):
        request = make_movement("cex_to_cex_gated", approve=True, **kwargs)
        return drive(request, "withdraw", *TO_COMPLETED)

    return _make


@pytest.fixture
def intervention_unknown(make_movement):
    """cex_to_cex: the withdrawal completed, then its observation went UNKNOWN."""

    def _make(**kwargs):
        request = make_movement(approve=True, **kwargs)
        drive(request, "withdraw", *TO_COMPLETED)
        return drive(request, "withdraw_observe", "OBSERVING", "UNKNOWN")

    return _make


@pytest.fixture
def intervention_failed(make_movement):
    """cex_to_cex: the withdrawal completed, then its observation FAILED."""

    def _make(**kwargs):
        request = make_movement(approve=True, **kwargs)
        drive(request, "withdraw", *TO_COMPLETED)
        return drive(request, "withdraw_observe", "OBSERVING", "FAILED")

    return _make


@pytest.fixture
def intervention_reconciled(intervention_unknown):
    """MANUAL_INTERVENTION with nothing stuck any more: recovery found the UNKNOWN observation
    did happen (SUBMITTED) and the request is waiting for a supervisor to resume it."""

    def _make(**kwargs):
        request = intervention_unknown(**kwargs)
        with transaction.atomic():
            locked = MovementRequest.objects.select_for_update().get(pk=request.pk)
            node = next(n for n in current_nodes(locked, lock=True) if n.node_state == "UNKNOWN")
            set_node_state(node=node, new_state=NodeState.SUBMITTED, actor=WORKER)
        request.refresh_from_db()
        return request

    return _make


REASON = {"reason": "checked with the venue desk"}

# action name -> (fixture building a movement where it is legal, form data, state after it)
SCENARIOS = {
    "approve": ("make_movement", {}, RequestState.APPROVED),
    "reject": ("make_movement", REASON, RequestState.REJECTED),
    "resume_gate": (
        "waiting_at_gate",
        {"node_key": "manual_release", "note": "desk confirmed"},
        RequestState.EXECUTING,
    ),
    "cancel": ("executing", REASON, RequestState.CANCELLED),
    "resolve_unknown": (
        "intervention_unknown",
        {"node_key": "withdraw_observe", "outcome": "COMPLETED", "evidence": "txid 0xabc"},
        RequestState.EXECUTING,
    ),
    "intervention_resume": ("intervention_reconciled", REASON, RequestState.EXECUTING),
    "intervention_retry": (
        "intervention_failed",
        {"node_key": "withdraw_observe", **REASON},
        RequestState.EXECUTING,
    ),
    "force_complete": ("intervention_failed", REASON, RequestState.COMPLETED),
    "force_fail": ("intervention_failed", REASON, RequestState.FAILED),
}

OPERATOR_ACTIONS = ("approve", "reject", "resume_gate", "cancel")
SUPERVISOR_ONLY_ACTIONS = (
    "resolve_unknown",
    "intervention_resume",
    "intervention_retry",
    "force_complete",
    "force_fail",
)


@pytest.fixture
def scenario(request):
    """Build the movement an action applies to: ``scenario(name) -> (movement, data, state)``."""

    def _build(name: str):
        fixture, data, after = SCENARIOS[name]
        return request.getfixturevalue(fixture)(), data, after

    return _build


def snapshot(movement: MovementRequest) -> tuple:
    """Everything an action could change: the request state, its node attempts, its events."""
    movement = MovementRequest.objects.get(pk=movement.pk)
    return (
        movement.request_state,
        sorted(movement.nodes.values_list("node_key", "attempt", "node_state", "is_current")),
        movement.events.count(),
    )

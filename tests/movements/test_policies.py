"""The operator policies (movements.policies, reservations.policies) as tables: for each action,
the situations in which it is allowed and each refusal, with the rule that refuses and the error
a service raises for it. The policies are pure, so the rows are plain stand-ins.

That the console and the services agree with these functions on real movements is checked in
tests/admin/test_policy_agreement.py."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from movements.models import NodeKind
from movements.policies import (
    PERMISSIONS,
    Action,
    Rule,
    approval_open,
    approve_refusal,
    awaiting_approval,
    cancel_refusal,
    expire_refusal,
    force_complete_refusal,
    force_fail_refusal,
    intervention_resume_refusal,
    permission_refusal,
    reject_refusal,
    resolve_unknown_refusal,
    resume_gate_refusal,
    retry_refusal,
    waiting_gates,
)
from movements.states import RUNNING_NODE_STATES, NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import ActionRefused, NotFound, NotPermitted
from qtg.core.policies import Refusal, enforce
from reservations.models import ReservationState
from reservations.policies import SETTLE_PERMISSION, settle_permission_refusal, settle_refusal
from reservations.policies import Rule as SettleRule

NS, RS = NodeState, RequestState
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CREATOR_PK = 1
case = pytest.param


@dataclass(frozen=True)
class User:
    """A stand-in for a Django user: what Actor.has_perm and the policies read."""

    pk: int
    perms: frozenset[str] = frozenset()
    is_active: bool = True

    def has_perm(self, perm: str) -> bool:
        return perm in self.perms

    def get_username(self) -> str:
        return f"user{self.pk}"


@dataclass
class M:
    request_state: str
    created_by_id: int | None = CREATOR_PK
    expires_at: datetime | None = NOW + timedelta(hours=1)
    # What approving takes (the default policy: one approver, any group) and the approvals
    # so far, as a list page prefetches them.
    approvals_required: int = 1
    approval_groups: tuple = ()
    valid_approvals_list: tuple = ()


@dataclass
class N:
    node_key: str
    node_state: str
    kind: str = NodeKind.ACTION
    has_side_effect: bool = False


@dataclass
class Res:
    state: str


def user_actor(*perms: str, pk: int = 2, is_active: bool = True) -> Actor:
    return Actor.for_user(User(pk=pk, perms=frozenset(perms), is_active=is_active))


ALL_PERMS = (*PERMISSIONS.values(), SETTLE_PERMISSION)
SUPERVISOR = user_actor(*ALL_PERMS)
NOBODY = user_actor()
CREATOR = user_actor(*ALL_PERMS, pk=CREATOR_PK)
SYSTEM = Actor.system("tests")


def all_but(action: Action) -> Actor:
    """Every permission except the one ``action`` needs."""
    return user_actor(*(p for p in ALL_PERMS if p != PERMISSIONS[action]))


OK = None  # the action is allowed
PERMISSION = (Rule.PERMISSION, NotPermitted)
FOUR_EYES = (Rule.FOUR_EYES, NotPermitted)
STATE = (Rule.STATE, ActionRefused)
WINDOW = (Rule.APPROVAL_WINDOW, ActionRefused)
IN_FLIGHT = (Rule.IN_FLIGHT, ActionRefused)
NO_GATE = (Rule.NO_WAITING_GATE, ActionRefused)
NO_NODE = (Rule.NO_SUCH_NODE, NotFound)
NODE_STATE = (Rule.NODE_STATE, ActionRefused)
STUCK = (Rule.STUCK_NODES, ActionRefused)
RUNNING = (Rule.RUNNING_NODES, ActionRefused)
UNKNOWN = (Rule.UNKNOWN_NODES, ActionRefused)


def check(refusal: Refusal | None, expected) -> None:
    if expected is OK:
        assert refusal is None, refusal
        return
    assert refusal is not None, f"expected a refusal by {expected[0]}"
    assert (refusal.code, refusal.error) == expected, refusal


def pending(**kw) -> M:
    return M(RS.PENDING_APPROVAL, **kw)


PENDING, APPROVED = pending(), M(RS.APPROVED)
EXE, WMA, MI = M(RS.EXECUTING), M(RS.WAITING_MANUAL_ACTION), M(RS.MANUAL_INTERVENTION)
CLOSED = NOW - timedelta(seconds=1)

# --- approve, reject, expire -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actor", "movement", "expected"),
    [
        case(SUPERVISOR, PENDING, OK, id="someone else's pending movement"),
        case(SUPERVISOR, pending(expires_at=None), OK, id="a movement without a window"),
        case(SYSTEM, PENDING, OK, id="the system approves"),
        case(all_but(Action.APPROVE), PENDING, PERMISSION, id="without the permission"),
        case(user_actor(*ALL_PERMS, is_active=False), PENDING, PERMISSION, id="inactive user"),
        case(CREATOR, PENDING, FOUR_EYES, id="its creator"),
        case(user_actor(pk=CREATOR_PK), PENDING, PERMISSION, id="its creator, no permission"),
        case(CREATOR, APPROVED, FOUR_EYES, id="its creator, once approved (a 403 first)"),
        case(CREATOR, pending(expires_at=CLOSED), FOUR_EYES, id="its creator, window closed"),
        case(SUPERVISOR, APPROVED, STATE, id="already approved"),
        case(SUPERVISOR, M(RS.REJECTED), STATE, id="rejected"),
        case(SUPERVISOR, pending(expires_at=CLOSED), WINDOW, id="the window closed"),
        case(SUPERVISOR, pending(expires_at=NOW), WINDOW, id="the window closes this instant"),
    ],
)
def test_approve(actor, movement, expected):
    check(
        approve_refusal(actor=actor, movement=movement, now=NOW, approvals=(), approver_groups=()),
        expected,
    )


def test_approve_refusals_say_what_the_api_says():
    four_eyes = approve_refusal(
        actor=CREATOR, movement=PENDING, now=NOW, approvals=(), approver_groups=()
    )
    state = approve_refusal(
        actor=SUPERVISOR, movement=APPROVED, now=NOW, approvals=(), approver_groups=()
    )
    window = approve_refusal(
        actor=SUPERVISOR,
        movement=pending(expires_at=CLOSED),
        now=NOW,
        approvals=(),
        approver_groups=(),
    )

    assert (four_eyes.message, four_eyes.details) == (
        "four-eyes: you cannot approve a movement you created",
        {},
    )
    assert state.message == "cannot approve: the movement is APPROVED"
    assert state.details == {"current_state": "APPROVED", "allowed_states": ["PENDING_APPROVAL"]}
    assert window.message == f"cannot approve: the approval window closed at {CLOSED.isoformat()}"
    assert window.details == {
        "current_state": "PENDING_APPROVAL",
        "expires_at": CLOSED.isoformat(),
    }


@pytest.mark.parametrize(
    ("actor", "movement", "expected"),
    [
        case(SUPERVISOR, PENDING, OK, id="a pending movement"),
        case(CREATOR, PENDING, OK, id="its creator may reject it"),
        case(SUPERVISOR, pending(expires_at=CLOSED), OK, id="the window closed"),
        case(all_but(Action.REJECT), PENDING, PERMISSION, id="without the permission"),
        case(SUPERVISOR, EXE, STATE, id="already executing"),
        case(SUPERVISOR, M(RS.EXPIRED), STATE, id="expired"),
    ],
)
def test_reject(actor, movement, expected):
    check(reject_refusal(actor=actor, movement=movement), expected)


@pytest.mark.parametrize(
    ("movement", "expected"),
    [
        case(pending(expires_at=CLOSED), OK, id="pending, the window closed"),
        case(pending(expires_at=NOW), OK, id="pending, closing this instant"),
        case(PENDING, WINDOW, id="pending, the window open"),
        case(pending(expires_at=None), WINDOW, id="pending without a window"),
        case(M(RS.APPROVED, expires_at=CLOSED), STATE, id="approved meanwhile"),
    ],
)
def test_expire(movement, expected):
    check(expire_refusal(movement=movement, now=NOW), expected)


def test_the_approval_predicates_the_console_reads():
    assert awaiting_approval(PENDING)
    assert not awaiting_approval(APPROVED)
    assert approval_open(PENDING, NOW)
    assert approval_open(pending(expires_at=None), NOW)
    assert not approval_open(pending(expires_at=NOW), NOW)


# --- cancel ------------------------------------------------------------------------------------

NOT_STARTED = [N("withdraw", NS.READY), N("withdraw_observe", NS.BLOCKED)]
AT_GATE = [N("withdraw", NS.COMPLETED), N("manual_release", NS.READY, NodeKind.MANUAL_GATE)]
IN_FLIGHT_STATES = sorted([*RUNNING_NODE_STATES, NS.UNKNOWN])


@pytest.mark.parametrize(
    ("actor", "movement", "nodes", "expected"),
    [
        case(SUPERVISOR, EXE, NOT_STARTED, OK, id="executing, nothing started"),
        case(SUPERVISOR, WMA, AT_GATE, OK, id="waiting at a gate"),
        case(all_but(Action.CANCEL), EXE, NOT_STARTED, PERMISSION, id="without the permission"),
        case(SUPERVISOR, PENDING, NOT_STARTED, STATE, id="pending approval"),
        case(SUPERVISOR, MI, [N("withdraw", NS.FAILED)], STATE, id="in manual intervention"),
        case(SUPERVISOR, M(RS.COMPLETED), [N("w", NS.COMPLETED)], STATE, id="completed"),
        *[
            case(SUPERVISOR, EXE, [N("w", state)], IN_FLIGHT, id=f"a node is {state}")
            for state in IN_FLIGHT_STATES
        ],
    ],
)
def test_cancel(actor, movement, nodes, expected):
    check(cancel_refusal(actor=actor, movement=movement, nodes=nodes), expected)


def test_cancel_names_the_nodes_in_flight():
    nodes = [N("withdraw", NS.SUBMITTED), N("screening", NS.UNKNOWN), N("later", NS.BLOCKED)]

    refusal = cancel_refusal(actor=SUPERVISOR, movement=EXE, nodes=nodes)

    assert refusal.message == "cannot cancel while money may be in flight at withdraw, screening"
    assert refusal.details == {
        "current_state": "EXECUTING",
        "in_flight_nodes": ["withdraw", "screening"],
    }


# --- resume a manual gate ----------------------------------------------------------------------

TWO_GATES = [
    N("manual_a", NS.READY, NodeKind.MANUAL_GATE),
    N("manual_b", NS.READY, NodeKind.MANUAL_GATE),
]
BLOCKED_GATE = [N("withdraw", NS.SUBMITTED), N("manual_release", NS.BLOCKED, NodeKind.MANUAL_GATE)]


@pytest.mark.parametrize(
    ("actor", "movement", "nodes", "node_key", "expected"),
    [
        case(SUPERVISOR, WMA, AT_GATE, None, OK, id="waiting at the gate"),
        case(SUPERVISOR, EXE, AT_GATE, None, OK, id="executing with a gate ready"),
        case(SUPERVISOR, WMA, AT_GATE, "manual_release", OK, id="the gate named"),
        case(SUPERVISOR, WMA, TWO_GATES, None, OK, id="two gates, none named (service asks)"),
        case(SUPERVISOR, WMA, TWO_GATES, "manual_b", OK, id="one of two gates named"),
        case(all_but(Action.RESUME_GATE), WMA, AT_GATE, None, PERMISSION, id="no permission"),
        case(SUPERVISOR, MI, AT_GATE, None, STATE, id="in manual intervention"),
        case(SUPERVISOR, PENDING, AT_GATE, None, STATE, id="pending approval"),
        case(SUPERVISOR, EXE, NOT_STARTED, None, NO_GATE, id="no gate at all"),
        case(SUPERVISOR, EXE, BLOCKED_GATE, None, NO_GATE, id="the gate is still blocked"),
        case(SUPERVISOR, EXE, NOT_STARTED, "withdraw", NO_GATE, id="a ready node, not a gate"),
        case(SUPERVISOR, WMA, AT_GATE, "withdraw", NO_GATE, id="another node named"),
        case(SUPERVISOR, WMA, AT_GATE, "nope", NO_GATE, id="a node that does not exist"),
    ],
)
def test_resume_gate(actor, movement, nodes, node_key, expected):
    refusal = resume_gate_refusal(actor=actor, movement=movement, nodes=nodes, node_key=node_key)
    check(refusal, expected)


def test_the_waiting_gates_are_the_ready_manual_gates():
    nodes = [*TWO_GATES, N("manual_c", NS.BLOCKED, NodeKind.MANUAL_GATE), N("w", NS.READY)]

    assert [g.node_key for g in waiting_gates(nodes)] == ["manual_a", "manual_b"]
    assert [g.node_key for g in waiting_gates(nodes, "manual_b")] == ["manual_b"]
    assert waiting_gates(nodes, "manual_c") == []


def test_a_missing_gate_is_named_in_the_refusal():
    named = resume_gate_refusal(actor=SUPERVISOR, movement=EXE, nodes=AT_GATE, node_key="x")
    unnamed = resume_gate_refusal(actor=SUPERVISOR, movement=EXE, nodes=NOT_STARTED)

    assert named.message == "no manual gate x is waiting"
    assert unnamed.message == "no manual gate is waiting"


# --- resolve an UNKNOWN node -------------------------------------------------------------------

OBSERVE_UNKNOWN = [N("withdraw", NS.COMPLETED), N("withdraw_observe", NS.UNKNOWN)]


@pytest.mark.parametrize(
    ("actor", "movement", "nodes", "node_key", "expected"),
    [
        case(SUPERVISOR, MI, OBSERVE_UNKNOWN, None, OK, id="in manual intervention"),
        case(SUPERVISOR, MI, OBSERVE_UNKNOWN, "withdraw_observe", OK, id="the UNKNOWN node"),
        case(SUPERVISOR, EXE, [N("w", NS.UNKNOWN)], "w", OK, id="executing"),
        case(
            all_but(Action.RESOLVE_UNKNOWN),
            MI,
            OBSERVE_UNKNOWN,
            "withdraw_observe",
            PERMISSION,
            id="without the permission",
        ),
        case(SUPERVISOR, EXE, NOT_STARTED, None, NODE_STATE, id="no node is UNKNOWN"),
        case(SUPERVISOR, MI, OBSERVE_UNKNOWN, "withdraw", NODE_STATE, id="that node is not"),
        case(SUPERVISOR, MI, OBSERVE_UNKNOWN, "teleport", NO_NODE, id="no such node"),
        case(SUPERVISOR, MI, OBSERVE_UNKNOWN, "", NO_NODE, id="an empty node name"),
        case(SUPERVISOR, M(RS.FAILED), OBSERVE_UNKNOWN, None, STATE, id="the movement ended"),
        case(
            SUPERVISOR,
            M(RS.FAILED),
            OBSERVE_UNKNOWN,
            "withdraw_observe",
            STATE,
            id="the UNKNOWN node of a movement that ended",
        ),
    ],
)
def test_resolve_unknown(actor, movement, nodes, node_key, expected):
    refusal = resolve_unknown_refusal(
        actor=actor, movement=movement, nodes=nodes, node_key=node_key
    )
    check(refusal, expected)


# --- the ways out of MANUAL_INTERVENTION -------------------------------------------------------

RECONCILED = [N("withdraw", NS.COMPLETED), N("withdraw_observe", NS.SUBMITTED)]
OBSERVE_FAILED = [N("withdraw", NS.COMPLETED), N("withdraw_observe", NS.FAILED)]


@pytest.mark.parametrize(
    ("actor", "movement", "nodes", "expected"),
    [
        case(SUPERVISOR, MI, RECONCILED, OK, id="nothing stuck any more"),
        case(all_but(Action.INTERVENTION_RESUME), MI, RECONCILED, PERMISSION, id="no permission"),
        case(SUPERVISOR, EXE, RECONCILED, STATE, id="already executing"),
        case(SUPERVISOR, MI, OBSERVE_FAILED, STUCK, id="a node is FAILED"),
        case(SUPERVISOR, MI, OBSERVE_UNKNOWN, STUCK, id="a node is UNKNOWN"),
    ],
)
def test_intervention_resume(actor, movement, nodes, expected):
    check(intervention_resume_refusal(actor=actor, movement=movement, nodes=nodes), expected)


@pytest.mark.parametrize(
    ("actor", "movement", "nodes", "node_key", "expected"),
    [
        case(SUPERVISOR, MI, OBSERVE_FAILED, None, OK, id="a node is FAILED"),
        case(SUPERVISOR, MI, OBSERVE_FAILED, "withdraw_observe", OK, id="the FAILED node"),
        case(
            all_but(Action.INTERVENTION_RETRY),
            MI,
            OBSERVE_FAILED,
            "withdraw_observe",
            PERMISSION,
            id="without the permission",
        ),
        case(SUPERVISOR, EXE, OBSERVE_FAILED, None, STATE, id="not in manual intervention"),
        case(SUPERVISOR, MI, OBSERVE_UNKNOWN, None, NODE_STATE, id="no node is FAILED"),
        case(SUPERVISOR, MI, OBSERVE_FAILED, "withdraw", NODE_STATE, id="that node is not"),
        case(SUPERVISOR, MI, OBSERVE_FAILED, "teleport", NO_NODE, id="no such node"),
    ],
)
def test_retry(actor, movement, nodes, node_key, expected):
    check(retry_refusal(actor=actor, movement=movement, nodes=nodes, node_key=node_key), expected)


FORCE_CASES = [
    case(SUPERVISOR, MI, OBSERVE_FAILED, OK, id="a node FAILED after money left"),
    case(SUPERVISOR, MI, [*OBSERVE_FAILED, N("d", NS.BLOCKED)], OK, id="steps not started"),
    case(SUPERVISOR, EXE, OBSERVE_FAILED, STATE, id="not in manual intervention"),
    case(SUPERVISOR, M(RS.COMPLETED), [N("w", NS.COMPLETED)], STATE, id="already completed"),
    *[
        case(SUPERVISOR, MI, [*OBSERVE_FAILED, N("c", state)], RUNNING, id=f"a node is {state}")
        for state in sorted(RUNNING_NODE_STATES)
    ],
    case(SUPERVISOR, MI, OBSERVE_UNKNOWN, UNKNOWN, id="a node is UNKNOWN"),
    case(
        SUPERVISOR,
        MI,
        [N("a", NS.UNKNOWN), N("b", NS.OBSERVING)],
        RUNNING,
        id="running is named before UNKNOWN",
    ),
]


@pytest.mark.parametrize(
    ("policy", "action"),
    [(force_complete_refusal, Action.FORCE_COMPLETE), (force_fail_refusal, Action.FORCE_FAIL)],
    ids=["force_complete", "force_fail"],
)
@pytest.mark.parametrize(("actor", "movement", "nodes", "expected"), FORCE_CASES)
def test_force(policy, action, actor, movement, nodes, expected):
    check(policy(actor=actor, movement=movement, nodes=nodes), expected)


@pytest.mark.parametrize(
    ("policy", "action"),
    [(force_complete_refusal, Action.FORCE_COMPLETE), (force_fail_refusal, Action.FORCE_FAIL)],
)
def test_each_force_needs_its_own_permission(policy, action):
    refusal = policy(actor=all_but(action), movement=MI, nodes=OBSERVE_FAILED)

    check(refusal, PERMISSION)
    assert refusal.details == {"permission": PERMISSIONS[action]}
    assert refusal.message == f"user:user2 lacks the permission {PERMISSIONS[action]}"


# --- permissions -------------------------------------------------------------------------------


@pytest.mark.parametrize("action", list(Action))
def test_each_action_needs_exactly_its_permission(action):
    assert permission_refusal(user_actor(PERMISSIONS[action]), action) is None
    assert permission_refusal(SYSTEM, action) is None
    check(permission_refusal(all_but(action), action), PERMISSION)


# --- settle a reservation by hand --------------------------------------------------------------


@pytest.mark.parametrize(
    ("actor", "reservation", "movement", "expected"),
    [
        case(SUPERVISOR, Res(ReservationState.HELD), M(RS.FAILED), OK, id="held, movement failed"),
        case(SUPERVISOR, Res(ReservationState.HELD), M(RS.CANCELLED), OK, id="held, cancelled"),
        case(
            user_actor(*PERMISSIONS.values()),
            Res(ReservationState.HELD),
            M(RS.FAILED),
            PERMISSION,
            id="without the permission",
        ),
        case(
            SUPERVISOR,
            Res(ReservationState.CONSUMED),
            M(RS.COMPLETED),
            (SettleRule.NOT_HELD, ActionRefused),
            id="already consumed",
        ),
        case(
            SUPERVISOR,
            Res(ReservationState.RELEASED),
            M(RS.EXECUTING),
            (SettleRule.NOT_HELD, ActionRefused),
            id="already released (checked before the movement)",
        ),
        case(
            SUPERVISOR,
            Res(ReservationState.HELD),
            MI,
            (SettleRule.MOVEMENT_NOT_FINISHED, ActionRefused),
            id="the movement has not finished",
        ),
    ],
)
def test_settle(actor, reservation, movement, expected):
    check(settle_refusal(actor=actor, reservation=reservation, movement=movement), expected)


def test_the_settle_permission_alone():
    assert settle_permission_refusal(user_actor(SETTLE_PERMISSION)) is None
    check(settle_permission_refusal(NOBODY), PERMISSION)


# --- a refusal becomes the service's error ------------------------------------------------------


def test_a_refusal_raises_its_error_with_its_message_and_details():
    refusal = approve_refusal(
        actor=SUPERVISOR, movement=APPROVED, now=NOW, approvals=(), approver_groups=()
    )

    with pytest.raises(ActionRefused) as raised:
        enforce(refusal)

    assert raised.value.code == "conflict"
    assert raised.value.http_status == 409
    assert raised.value.message == refusal.message
    assert raised.value.details == refusal.details


def test_four_eyes_is_a_403_like_a_missing_permission():
    for refusal in (
        approve_refusal(actor=CREATOR, movement=PENDING, now=NOW, approvals=(), approver_groups=()),
        approve_refusal(actor=NOBODY, movement=PENDING, now=NOW, approvals=(), approver_groups=()),
    ):
        error = refusal.exception()
        assert (type(error), error.code, error.http_status) == (
            NotPermitted,
            "permission_denied",
            403,
        )


def test_a_missing_node_is_a_404():
    error = retry_refusal(
        actor=SUPERVISOR, movement=MI, nodes=OBSERVE_FAILED, node_key="teleport"
    ).exception()

    assert (type(error), error.http_status, error.message) == (
        NotFound,
        404,
        "movement has no node 'teleport'",
    )


# --- the policies are pure: the facts come from the selectors --------------------------------


def test_the_policies_ask_the_database_nothing(make_movement, operator, django_assert_num_queries):
    from django.utils import timezone

    from movements import policies, selectors

    # given a movement waiting for approval, and the facts the selectors read about it
    movement = make_movement()
    actor = Actor.for_user(operator)
    policies.permission_refusal(actor, policies.Action.APPROVE)  # Django caches permissions
    approvals = selectors.valid_approvals(movement)
    groups = selectors.actor_groups(actor)
    open_keys = selectors.open_attention_keys(movement)

    # when the policies are asked
    with django_assert_num_queries(0):
        approve = policies.approve_refusal(
            actor=actor,
            movement=movement,
            now=timezone.now(),
            approvals=approvals,
            approver_groups=groups,
        )
        attention = policies.attention_refusal(
            actor=actor, movement=movement, open_attention_keys=open_keys
        )

    # then they answer from those facts alone
    assert approve is None
    assert attention is not None and "needs attention" in attention.message

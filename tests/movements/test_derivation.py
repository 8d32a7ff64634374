"""derive_request_state and should_release_reservation: the spec's summary table as cases, plus
property-based tests over random node sets."""

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from movements.services import derive_request_state, should_release_reservation
from movements.states import IN_FLIGHT_NODE_STATES, RUNNING_NODE_STATES, NodeState, RequestState

NS = NodeState


@dataclass
class N:
    node_state: str
    has_side_effect: bool = False
    node_key: str = "step"


@dataclass
class R:
    request_state: str


SUMMARY_TABLE = [
    ("all completed", [N(NS.COMPLETED, True), N(NS.COMPLETED)], RequestState.COMPLETED),
    ("completed and skipped", [N(NS.COMPLETED), N(NS.SKIPPED)], RequestState.COMPLETED),
    (
        "failed after a completed side effect",
        [N(NS.COMPLETED, True), N(NS.FAILED)],
        RequestState.MANUAL_INTERVENTION,
    ),
    (
        "unknown after a completed side effect",
        [N(NS.COMPLETED, True), N(NS.UNKNOWN)],
        RequestState.MANUAL_INTERVENTION,
    ),
    ("failed, no side effect completed", [N(NS.FAILED, True), N(NS.BLOCKED)], RequestState.FAILED),
    *[
        (
            f"failed while a sibling side effect is {state}",
            [N(NS.FAILED, True), N(state, True)],
            None,
        )
        for state in (
            NS.PREPARING,
            NS.AWAITING_SIGNATURE,
            NS.SUBMITTING,
            NS.SUBMITTED,
            NS.OBSERVING,
            NS.UNKNOWN,
        )
    ],
    (
        "failed while a read-only sibling is still observing",
        [N(NS.FAILED, True), N(NS.OBSERVING, False)],
        RequestState.FAILED,
    ),
    (
        "failed, and the sibling side effect settled as completed",
        [N(NS.FAILED, True), N(NS.COMPLETED, True)],
        RequestState.MANUAL_INTERVENTION,
    ),
    (
        "failed, and the sibling side effect failed too",
        [N(NS.FAILED, True), N(NS.FAILED, True), N(NS.BLOCKED)],
        RequestState.FAILED,
    ),
    (
        "failed after a completed side effect while another is submitted",
        [N(NS.COMPLETED, True), N(NS.FAILED), N(NS.SUBMITTED, True)],
        RequestState.MANUAL_INTERVENTION,
    ),
    (
        "failed next to a completed read-only node",
        [N(NS.COMPLETED, False), N(NS.FAILED)],
        RequestState.FAILED,
    ),
    ("only unknown, no side effect completed", [N(NS.UNKNOWN, True), N(NS.BLOCKED)], None),
    (
        "manual gate ready, nothing running",
        [N(NS.COMPLETED, True), N(NS.READY, node_key="manual_release"), N(NS.BLOCKED)],
        RequestState.WAITING_MANUAL_ACTION,
    ),
    (
        "manual gate ready while a branch is running",
        [N(NS.READY, node_key="manual_release"), N(NS.SUBMITTED, True)],
        None,
    ),
    (
        "manual gate ready while a branch awaits signature",
        [N(NS.READY, node_key="manual_release"), N(NS.AWAITING_SIGNATURE, True)],
        None,
    ),
    ("a READY node not named manual_", [N(NS.READY), N(NS.BLOCKED)], None),
    ("still executing", [N(NS.COMPLETED, True), N(NS.OBSERVING), N(NS.BLOCKED)], None),
]


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [(nodes, expected) for _, nodes, expected in SUMMARY_TABLE],
    ids=[name for name, _, _ in SUMMARY_TABLE],
)
def test_derivation_follows_the_spec_summary_table(nodes, expected):
    assert derive_request_state(nodes) == expected


node_strategy = st.builds(
    N,
    node_state=st.sampled_from(list(NodeState)),
    has_side_effect=st.booleans(),
    node_key=st.sampled_from(["withdraw", "deposit_observe", "manual_release", "manual_check"]),
)


@given(st.lists(node_strategy, min_size=1, max_size=8))
def test_derivation_priorities_hold_for_any_node_set(nodes):
    derived = derive_request_state(nodes)
    states = [n.node_state for n in nodes]
    all_done = all(s in (NS.COMPLETED, NS.SKIPPED) for s in states)
    broken = any(s in (NS.FAILED, NS.UNKNOWN) for s in states)
    side_effect_done = any(n.node_state == NS.COMPLETED and n.has_side_effect for n in nodes)
    moving = any(n.has_side_effect and n.node_state in IN_FLIGHT_NODE_STATES for n in nodes)

    if all_done:
        assert derived == RequestState.COMPLETED
    elif broken and side_effect_done:
        assert derived == RequestState.MANUAL_INTERVENTION
    elif NS.FAILED in states and moving:
        assert derived is None
    elif NS.FAILED in states:
        assert derived == RequestState.FAILED
    elif derived == RequestState.WAITING_MANUAL_ACTION:
        assert any(n.node_state == NS.READY and n.node_key.startswith("manual_") for n in nodes)
        assert not any(s in RUNNING_NODE_STATES for s in states)
    else:
        assert derived is None


@given(st.lists(node_strategy, min_size=1, max_size=8))
def test_a_movement_with_money_out_never_derives_a_safe_failure(nodes):
    side_effect_done = any(n.node_state == NS.COMPLETED and n.has_side_effect for n in nodes)
    if side_effect_done:
        assert derive_request_state(nodes) != RequestState.FAILED


@given(st.lists(node_strategy, min_size=1, max_size=8))
def test_nothing_terminal_is_derived_while_money_may_be_moving(nodes):
    if any(n.has_side_effect and n.node_state in IN_FLIGHT_NODE_STATES for n in nodes):
        assert derive_request_state(nodes) not in (RequestState.FAILED, RequestState.COMPLETED)


@pytest.mark.parametrize("state", [RequestState.REJECTED, RequestState.EXPIRED])
def test_rejected_and_expired_always_release(state):
    assert should_release_reservation(R(state), [N(NS.COMPLETED, True)]) is True


@pytest.mark.parametrize("state", [RequestState.CANCELLED, RequestState.FAILED])
def test_cancelled_and_failed_release_only_without_a_completed_side_effect(state):
    assert should_release_reservation(R(state), [N(NS.COMPLETED, False), N(NS.FAILED)]) is True
    assert should_release_reservation(R(state), [N(NS.COMPLETED, True), N(NS.FAILED)]) is False


@given(st.sampled_from(list(RequestState)), st.lists(node_strategy, max_size=6))
def test_other_states_never_release(state, nodes):
    if state not in (
        RequestState.REJECTED,
        RequestState.EXPIRED,
        RequestState.CANCELLED,
        RequestState.FAILED,
    ):
        assert should_release_reservation(R(state), nodes) is False


# The extension for an UNKNOWN side effect that recovery is still settling by itself (issue
# 25: CCTP recovers like the others): ``recovering`` names those nodes.
RECOVERING_TABLE = [
    (
        "a mint in doubt beside a completed burn, recovery settling it",
        [N(NS.COMPLETED, True, "burn"), N(NS.UNKNOWN, True, "mint"), N(NS.BLOCKED)],
        {"mint"},
        None,
    ),
    (
        "the same mint once a person was asked about it",
        [N(NS.COMPLETED, True, "burn"), N(NS.UNKNOWN, True, "mint"), N(NS.BLOCKED)],
        set(),
        RequestState.MANUAL_INTERVENTION,
    ),
    (
        "a read-only node in doubt is never 'recovering' (the world contradicted it)",
        [N(NS.COMPLETED, True, "burn"), N(NS.UNKNOWN, False, "mint_observe")],
        {"mint_observe"},
        RequestState.MANUAL_INTERVENTION,
    ),
    (
        "a recovering node does not hide a FAILED sibling",
        [N(NS.COMPLETED, True, "burn"), N(NS.UNKNOWN, True, "mint"), N(NS.FAILED, True, "x")],
        {"mint"},
        RequestState.MANUAL_INTERVENTION,
    ),
    (
        "another node in doubt that nobody is settling",
        [N(NS.COMPLETED, True, "a"), N(NS.UNKNOWN, True, "b"), N(NS.UNKNOWN, True, "c")],
        {"b"},
        RequestState.MANUAL_INTERVENTION,
    ),
]


@pytest.mark.parametrize(
    ("nodes", "recovering", "expected"),
    [(nodes, recovering, expected) for _, nodes, recovering, expected in RECOVERING_TABLE],
    ids=[name for name, *_ in RECOVERING_TABLE],
)
def test_an_unknown_side_effect_recovery_is_settling_is_not_yet_a_manual_intervention(
    nodes, recovering, expected
):
    assert derive_request_state(nodes, recovering=recovering) == expected


@given(
    st.lists(node_strategy, min_size=1, max_size=8),
    st.sets(st.sampled_from(["withdraw", "deposit_observe", "manual_release", "manual_check"])),
)
def test_recovering_nodes_only_ever_defer_manual_intervention(nodes, recovering):
    """Naming nodes as recovering never derives FAILED or COMPLETED where the spec would not,
    and changes nothing but MANUAL_INTERVENTION into 'not yet' (None, or waiting at a manual
    gate as the spec says for a movement whose only trouble is a node in doubt)."""
    plain = derive_request_state(nodes)
    deferred = derive_request_state(nodes, recovering=recovering)
    if deferred != plain:
        assert plain == RequestState.MANUAL_INTERVENTION
        assert deferred in (None, RequestState.WAITING_MANUAL_ACTION)
        assert any(
            n.node_state == NS.UNKNOWN and n.has_side_effect and n.node_key in recovering
            for n in nodes
        )
    if any(n.node_state == NS.COMPLETED and n.has_side_effect for n in nodes):
        assert deferred != RequestState.FAILED

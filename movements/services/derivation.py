"""The pure rules: request state derived from node states, and when a reservation is released."""

from collections.abc import Collection, Iterable
from typing import Any

from movements.states import (
    IN_FLIGHT_NODE_STATES,
    RUNNING_NODE_STATES,
    NodeState,
    RequestState,
)


def derive_request_state(
    nodes: Iterable[Any], *, recovering: Collection[str] = ()
) -> RequestState | None:
    """The spec's derivation, in its priority order; None means 'no change yet'.

    Two extensions (DESIGN.md §3, money safety):
    - while a side-effect node may still be moving money (``money_may_be_moving``), no
      FAILED is derived (nor COMPLETED, which cannot hold then anyway): a FAILED sibling
      waits for it to settle, and then the spec's priorities apply unchanged
      (MANUAL_INTERVENTION if a side effect completed, FAILED otherwise);
    - ``recovering``: keys of UNKNOWN side-effect nodes whose recovery is still settling
      them by itself (``unresolved_unknown`` says which are not). Such a node does not yet
      make a completed side effect a MANUAL_INTERVENTION: its own submit is in doubt (its
      worker died, its answer was lost) and recovery finds it by its key or hash, as it does
      for the first side effect of a movement. Once recovery asks a person (or concludes
      FAILED), the spec's rule applies.

    Reads only ``node_state``, ``has_side_effect`` and ``node_key`` of each node.
    """
    nodes = list(nodes)
    if all(node.node_state in (NodeState.COMPLETED, NodeState.SKIPPED) for node in nodes):
        return RequestState.COMPLETED

    failed = any(node.node_state == NodeState.FAILED for node in nodes)
    unknown = any(
        node.node_state == NodeState.UNKNOWN
        and not (node.has_side_effect and node.node_key in recovering)
        for node in nodes
    )
    completed_with_side_effect = any(
        node.node_state == NodeState.COMPLETED and node.has_side_effect for node in nodes
    )
    if failed or unknown:
        if completed_with_side_effect:
            return RequestState.MANUAL_INTERVENTION
        if failed and not money_may_be_moving(nodes):
            return RequestState.FAILED
        if failed:
            return None

    waiting_at_gate = any(
        node.node_state == NodeState.READY and node.node_key.startswith("manual_") for node in nodes
    )
    if waiting_at_gate and not any(node.node_state in RUNNING_NODE_STATES for node in nodes):
        return RequestState.WAITING_MANUAL_ACTION
    return None


def money_may_be_moving(nodes: Iterable[Any]) -> bool:
    """A side-effect node is between dispatch and a settled outcome: PREPARING,
    AWAITING_SIGNATURE, SUBMITTING, SUBMITTED, OBSERVING (a submitted transfer being watched
    to finality) or UNKNOWN. DESIGN.md lists all of these but OBSERVING; an action node
    observes its own transfer in OBSERVING, when money has certainly left, so it counts too."""
    return any(node.has_side_effect and node.node_state in IN_FLIGHT_NODE_STATES for node in nodes)


def has_completed_side_effect(nodes: Iterable[Any]) -> bool:
    return any(node.node_state == NodeState.COMPLETED and node.has_side_effect for node in nodes)


def should_release_reservation(request: Any, nodes: Iterable[Any]) -> bool:
    """The spec's rule, verbatim: REJECTED/EXPIRED always; CANCELLED/FAILED only when no
    side-effect node completed."""
    if request.request_state in (RequestState.REJECTED, RequestState.EXPIRED):
        return True
    if request.request_state in (RequestState.CANCELLED, RequestState.FAILED):
        return not has_completed_side_effect(nodes)
    return False

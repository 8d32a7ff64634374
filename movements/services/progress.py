"""Frontier advancement and the request state derived from node states (signals-free)."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from movements.compiler import condition_holds, request_context
from movements.models import (
    MovementAttention,
    MovementPlanEdge,
    MovementRequest,
    MovementRequestNode,
)
from movements.selectors import current_nodes
from movements.services.derivation import derive_request_state
from movements.services.effects import after_frontier_advanced
from movements.services.state import record_event, save_fields, set_node_state, set_request_state
from movements.services.writers import RowWriter
from movements.states import (
    DONE_NODE_STATES,
    RUNNING_NODE_STATES,
    NodeState,
    RequestState,
    can_transition_request_state,
)
from qtg.core.actors import Actor, resolve_actor


@dataclass(frozen=True)
class PlanGraph:
    """The on_success edges of one request's plan: successors (in plan order) and
    predecessors of each node key."""

    successors: dict[str, list[str]]
    predecessors: dict[str, list[str]]


# A request's plan is an immutable snapshot taken at creation, so its graph can be kept for
# the life of the process (bounded): frontier advancement then costs no plan queries.
_PLAN_GRAPHS: dict[Any, PlanGraph] = {}
_PLAN_GRAPH_CACHE_SIZE = 4096


def plan_graph(request: MovementRequest) -> PlanGraph:
    """The request's plan graph, read with one query and cached per process."""
    graph = _PLAN_GRAPHS.get(request.pk)
    if graph is not None:
        return graph
    edges = (
        MovementPlanEdge.objects.filter(request_id=request.pk)
        .order_by("target__position", "target__key")
        .values_list("source__key", "target__key")
    )
    return remember_plan_graph(request, edges)


def remember_plan_graph(request: MovementRequest, edges: Iterable[tuple[str, str]]) -> PlanGraph:
    """Cache the plan graph of ``request`` from its edges (source key, target key) as the
    caller read them, in the order of their targets' position then key."""
    successors: dict[str, list[str]] = {}
    predecessors: dict[str, list[str]] = {}
    for source, target in edges:
        successors.setdefault(source, []).append(target)
        predecessors.setdefault(target, []).append(source)
    graph = PlanGraph(successors, predecessors)
    if len(_PLAN_GRAPHS) >= _PLAN_GRAPH_CACHE_SIZE:
        _PLAN_GRAPHS.clear()
    _PLAN_GRAPHS[request.pk] = graph
    return graph


def compute_frontier(nodes: list[Any]) -> list[str]:
    """Keys of the nodes that are READY or running: where the movement is now."""
    return [
        node.node_key
        for node in nodes
        if node.node_state == NodeState.READY or node.node_state in RUNNING_NODE_STATES
    ]


def _path_to(current: RequestState, target: RequestState) -> list[RequestState] | None:
    """The legal path from ``current`` to ``target``: direct, or through EXECUTING (a request
    that is APPROVED or waiting at a gate passes through EXECUTING on its way elsewhere)."""
    if can_transition_request_state(current, target):
        return [target]
    if can_transition_request_state(current, RequestState.EXECUTING) and (
        can_transition_request_state(RequestState.EXECUTING, target)
    ):
        return [RequestState.EXECUTING, target]
    return None


def apply_request_state_from_nodes(
    request: MovementRequest,
    nodes: list[MovementRequestNode] | None = None,
    *,
    actor: Actor | None = None,
    actor_type: str | None = None,
    actor_id: str | None = None,
    detail: dict[str, Any] | None = None,
    writer: RowWriter | None = None,
) -> RequestState | None:
    """Write the derived request state when the transition is legal; return the new state.

    The post-transition table (reservation, callback, frontier) runs inside
    ``set_request_state``. MANUAL_INTERVENTION is left only by an operator: when an operator's
    action (resolving, retrying) leaves no node FAILED or UNKNOWN, the request goes back to
    EXECUTING (or on to COMPLETED); when automatic recovery does, its finding is recorded
    ("resume to continue") and the request stays where a person will look at it. A FAILED or
    MANUAL_INTERVENTION request says in ``failure_reason`` which node and which error put it
    there. The caller holds the request lock; a caller writing in a batch passes its
    ``writer`` (see ``state.batch``).
    """
    actor = resolve_actor(actor, actor_type, actor_id)
    if nodes is None:
        nodes = current_nodes(request, writer=writer)
    derived = derive_request_state(nodes, recovering=recovering_nodes(nodes))
    current = RequestState(request.request_state)

    if current == RequestState.MANUAL_INTERVENTION:
        unresolved = any(n.node_state in (NodeState.FAILED, NodeState.UNKNOWN) for n in nodes)
        if unresolved or derived == RequestState.FAILED:
            return None
        if derived is None:
            derived = RequestState.EXECUTING
        if not actor.is_user:
            record_event(
                request=request,
                actor=actor,
                detail={
                    "recovered": True,
                    "would_be": str(derived),
                    # The event's time says when.
                    "note": "recovered: resume to continue",
                },
                writer=writer,
            )
            return None

    if derived is None or derived == current:
        return None
    path = _path_to(current, derived)
    if path is None:
        return None
    fields = []
    if derived in (RequestState.FAILED, RequestState.MANUAL_INTERVENTION):
        reason = failure_reason_of(nodes)
        if reason:
            request.failure_reason = reason
            fields = ["failure_reason"]
    for target in path:
        set_request_state(
            request=request,
            new_state=target,
            actor=actor,
            nodes=nodes,
            detail={"derived_from_nodes": True, **(detail or {})},
            update_fields=fields if target == derived else [],
            writer=writer,
        )
    return derived


def recovering_nodes(nodes: list[MovementRequestNode]) -> frozenset[str]:
    """Keys of the UNKNOWN side-effect nodes that recovery is still settling by itself: no
    person has been asked about them (no open attention on the node). One that recovery, a
    sweep or an executor asked a person about is unresolved: beside a completed side effect
    it is the spec's MANUAL_INTERVENTION (``derive_request_state``)."""
    doubtful = [n for n in nodes if n.node_state == NodeState.UNKNOWN and n.has_side_effect]
    if not doubtful or not any(
        n.node_state == NodeState.COMPLETED and n.has_side_effect for n in nodes
    ):
        return frozenset()
    asked = set(
        MovementAttention.objects.filter(
            node_id__in=[n.pk for n in doubtful], resolved_at__isnull=True
        ).values_list("node_id", flat=True)
    )
    return frozenset(n.node_key for n in doubtful if n.pk not in asked)


def failure_reason_of(nodes: list[MovementRequestNode]) -> str:
    """Which node put the movement where it is, and with what error: the FAILED nodes first,
    then the UNKNOWN ones."""
    for state, verb in ((NodeState.FAILED, "failed"), (NodeState.UNKNOWN, "is UNKNOWN")):
        for node in nodes:
            if node.node_state == state:
                error = (node.last_error or _last_transition(node))[:500]
                return f"{node.node_key} {verb}: {error}"
    return ""


def _last_transition(node: MovementRequestNode) -> str:
    """A node that reached its state with no error recorded: what its audit trail says."""
    event = node.events.filter(new_state=node.node_state).order_by("-pk").first()
    if event is None:
        return f"reached {node.node_state} (see its events)"
    detail = {k: v for k, v in (event.detail or {}).items() if k != "attention"}
    said = ", ".join(f"{k}={v}" for k, v in list(detail.items())[:6])
    return f"{event.old_state} -> {event.new_state} by {event.actor_type}:{event.actor_id}" + (
        f" ({said})" if said else ""
    )


def _wake(
    request: MovementRequest,
    candidates: list[str],
    by_key: dict[str, MovementRequestNode],
    preds: dict[str, list[str]],
    actor: Actor,
    context: dict[str, Any],
    writer: RowWriter | None,
) -> list[str]:
    """BLOCKED candidates whose predecessors are all COMPLETED/SKIPPED become READY, or SKIPPED
    when their condition does not hold (and then their own successors are considered)."""
    woken: list[str] = []
    queue = list(candidates)
    while queue:
        key = queue.pop(0)
        node = by_key.get(key)
        if node is None or node.node_state != NodeState.BLOCKED:
            continue
        if not all(by_key[p].node_state in DONE_NODE_STATES for p in preds.get(key, [])):
            continue
        condition = node.plan_node.condition
        if condition_holds(condition, context):
            set_node_state(node=node, new_state=NodeState.READY, actor=actor, writer=writer)
        else:
            set_node_state(
                node=node,
                new_state=NodeState.SKIPPED,
                actor=actor,
                detail={"reason": "condition not met", "condition": condition},
                writer=writer,
            )
            queue.extend(plan_graph(request).successors.get(key, []))
        woken.append(key)
    return woken


def _context(request: MovementRequest) -> dict[str, Any]:
    return request_context(
        asset=request.asset,
        amount=request.amount,
        source=request.source,
        destination=request.destination,
        params=request.params,
    )


def _advance(
    request: MovementRequest,
    candidates: list[str],
    nodes: list[MovementRequestNode],
    actor: Actor,
    cause: dict[str, Any],
    writer: RowWriter | None = None,
) -> None:
    by_key = {node.node_key: node for node in nodes}
    preds = plan_graph(request).predecessors
    woken = _wake(request, candidates, by_key, preds, actor, _context(request), writer)
    frontier = compute_frontier(nodes)
    if frontier != request.current_frontier:
        request.current_frontier = frontier
        save_fields(request, ["current_frontier"], writer=writer)
    if woken:
        after_frontier_advanced(request=request, woken=woken, frontier=frontier, cause=cause)
    apply_request_state_from_nodes(request, actor=actor, nodes=nodes, writer=writer)


def start_roots(
    request: MovementRequest, *, actor: Actor, nodes: list[MovementRequestNode] | None = None
) -> None:
    """Wake the nodes with no predecessors (on approval); ``nodes``: the request's current
    nodes, when the caller holds them locked already."""
    if nodes is None:
        nodes = current_nodes(request, lock=True)
    preds = plan_graph(request).predecessors
    roots = [node.node_key for node in nodes if not preds.get(node.node_key)]
    _advance(request, roots, nodes, actor, {"cause": "approved"})


def advance_after_completion(
    request: MovementRequest,
    completed_node: MovementRequestNode,
    nodes: list[MovementRequestNode] | None = None,
    *,
    actor: Actor | None = None,
    actor_type: str | None = None,
    actor_id: str | None = None,
    writer: RowWriter | None = None,
) -> None:
    """After a node completes: wake its successors along on_success edges (a join waits for all
    its predecessors), update ``current_frontier``, send ``frontier_advanced``, and derive the
    request state. The caller holds the request lock; a caller writing in a batch passes its
    ``writer`` (see ``state.batch``)."""
    actor = resolve_actor(actor, actor_type, actor_id)
    if nodes is None:
        nodes = current_nodes(request, lock=True, writer=writer)
    # The caller's instance of the completed node is the freshest one.
    nodes = [completed_node if n.pk == completed_node.pk else n for n in nodes]
    successors = plan_graph(request).successors.get(completed_node.node_key, [])
    if not successors:
        frontier = compute_frontier(nodes)
        if frontier != request.current_frontier:
            request.current_frontier = frontier
            save_fields(request, ["current_frontier"], writer=writer)
        apply_request_state_from_nodes(request, actor=actor, nodes=nodes, writer=writer)
        return
    cause = {"completed_node": completed_node.node_key}
    _advance(request, successors, nodes, actor, cause, writer)


def new_attempt(
    request: MovementRequest,
    failed: MovementRequestNode,
    nodes: list[MovementRequestNode],
    *,
    actor: Actor,
    reason: str,
    writer: RowWriter | None = None,
) -> list[MovementRequestNode]:
    """A new attempt (READY, its own idempotency key) of the FAILED ``failed``: the failed
    attempt keeps its history and no longer counts in derivation; the frontier is recomputed.
    Returns the movement's current nodes with the new attempt in the failed one's place. The
    caller holds the movement's lock and derives its state after."""
    failed.is_current = False
    save_fields(failed, ["is_current"], writer=writer)
    if writer is not None:
        writer.flush()  # the old attempt stops being current before the new one is inserted
    attempt = MovementRequestNode.attempt_of(
        failed.plan_node, request=request, attempt=failed.attempt + 1
    )
    attempt.save()
    record_event(
        request=request,
        node=failed,
        actor=actor,
        detail={"superseded_by_attempt": attempt.attempt, "reason": reason},
        writer=writer,
    )
    set_node_state(
        node=attempt,
        new_state=NodeState.READY,
        actor=actor,
        detail={"retry_of_attempt": failed.attempt, "reason": reason},
        writer=writer,
    )
    nodes = [attempt if n.pk == failed.pk else n for n in nodes]
    request.current_frontier = compute_frontier(nodes)
    save_fields(request, ["current_frontier"], writer=writer)
    return nodes


def refresh_frontier(request: MovementRequest, *, actor: Actor) -> None:
    """Re-examine every BLOCKED node whose predecessors are done (used after a repair)."""
    nodes = current_nodes(request, lock=True)
    blocked = [node.node_key for node in nodes if node.node_state == NodeState.BLOCKED]
    _advance(request, blocked, nodes, actor, {"cause": "refresh"})

"""Claiming: a worker takes a batch of due nodes (``QTG_CLAIM_BATCH``) in one short
transaction.

The claim locks the due nodes together with their requests, in one statement, with
``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL (a worker never waits for a lock it does
not hold yet), gives them a lease and moves them (READY -> PREPARING/OBSERVING); SUBMITTED,
OBSERVING and UNKNOWN nodes are leased without a state change. Movement rows are locked FOR NO
KEY UPDATE (their keys never change): writers still queue on a row, but inserting the audit
events and other rows that reference it never waits for one, so such a statement cannot close
a lock cycle.

Exactly once starts here: the idempotency key of an attempt is persisted when the node is
claimed, before anything is submitted, and sent to the venue with the submit.

Money safety: once a node of a movement FAILED, no further side-effect node of it is
dispatched (it waits READY for an operator). A node whose executor no deployment app serves is
never handed to a worker: a READY one FAILS with that error, a watched one asks a person.

On SQLite (embedded) there are no row locks: transactions are IMMEDIATE, so writers queue.
"""

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from movements.executors import get_executor, is_registered
from movements.executors.base import ExecutionContext, Executor, Upstream
from movements.models import AttentionReason, MovementRequest, MovementRequestNode, NodeKind
from movements.services.address_book import Standing, standing_message, standing_of
from movements.services.approvals import void_changed_approvals
from movements.services.attention import attention_raise
from movements.services.execution.leases import Fence, take_lease
from movements.services.progress import apply_request_state_from_nodes
from movements.services.state import (
    batch,
    record_event,
    save_fields,
    save_leases,
    set_node_state,
    set_request_state,
)
from movements.services.writers import RowWriter
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.compiled import Compiled

NS = NodeState
RS = RequestState

# READY nodes are dispatched only for these requests (never before approval, never after).
DISPATCH_REQUEST_STATES = (RS.APPROVED, RS.EXECUTING)
# Observation and recovery continue while money may be in flight, including in
# MANUAL_INTERVENTION: nothing with money in flight is auto-terminalized.
WATCH_REQUEST_STATES = (RS.EXECUTING, RS.WAITING_MANUAL_ACTION, RS.MANUAL_INTERVENTION)

LEASE_FIELDS = ["lease_owner", "lease_epoch", "lease_expires_at", "heartbeat_at"]


def worker_identity() -> str:
    """host:pid:random, unique per process (and per fork)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def worker_actor(owner: str, epoch: int | None = None) -> Actor:
    """The actor a worker's transitions are recorded under: the process, and the lease epoch
    it held when it has one (the node names the attempt)."""
    held = f"#epoch{epoch}" if epoch is not None else ""
    return Actor.system(f"worker:{owner}{held}"[:128])


def attempt_idempotency_key(node: MovementRequestNode) -> str:
    """One key per side-effecting attempt (a retried node is a new attempt, a new key)."""
    return f"qtg-{node.request_id}-{node.node_key}-{node.attempt}"


@dataclass
class Claim:
    """A node this worker holds the lease of, with what the executor needs to know."""

    node_id: int
    request_id: Any
    owner: str
    state: NodeState
    kind: str
    signing_required: bool
    executor: Executor
    context: ExecutionContext
    # The node as this worker last wrote it (with its request): what a lock-free
    # compare-and-set transition starts from.
    node: MovementRequestNode
    # The lease epoch this claim holds: every fence and every result is checked against it.
    epoch: int = 0
    # Another node of the movement has a side effect: this node's submit answer is written as
    # soon as it comes (``runs``). Unknown (True) unless the claim read it.
    shares_side_effects: bool = True


def due(now: Any) -> Q:
    return Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)


def lease_free(now: Any) -> Q:
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)


def failed_sibling() -> Exists:
    """A current node of the same movement has FAILED (for a query on nodes)."""
    return Exists(
        MovementRequestNode.objects.filter(
            request_id=OuterRef("request_id"), is_current=True, node_state=NS.FAILED
        )
    )


def other_side_effect() -> Exists:
    """Another current node of the same movement has a side effect (for a query on nodes)."""
    return Exists(
        MovementRequestNode.objects.filter(
            request_id=OuterRef("request_id"), is_current=True, has_side_effect=True
        ).exclude(node_key=OuterRef("node_key"))
    )


def _claimable(
    states: tuple, request_states: tuple, limit: int, actions: bool | None = None, *, now: Any
):
    qs = (
        MovementRequestNode.objects.current()
        .filter(node_state__in=states, request__request_state__in=request_states)
        .filter(due(now), lease_free(now))
        .exclude(kind=NodeKind.MANUAL_GATE)
    )
    if actions is not None:
        # Only the action nodes, or only the others (``claim_ready_nodes``' first claim).
        qs = qs.filter(kind=NodeKind.ACTION) if actions else qs.exclude(kind=NodeKind.ACTION)
    if NS.READY in states:
        qs = qs.filter(Q(has_side_effect=False) | ~failed_sibling()).annotate(
            shares_side_effects=other_side_effect()
        )
    return (
        qs.select_related("request", "plan_node")
        # The request row is locked in the same statement as the node, and skipped if anyone
        # holds either: a worker holding a node lock never waits for its request's lock.
        .select_for_update(skip_locked=True, of=("self", "request"), no_key=True)
        .order_by("next_attempt_at", "id")
    )[:limit]


# Every claim sends it: compiled once per claim shape (``qtg.core.compiled``).
_CLAIMABLE = Compiled(_claimable, now=MovementRequestNode._meta.get_field("next_attempt_at"))


def _served(node: MovementRequestNode) -> bool:
    try:
        return is_registered(node.executor)
    except Exception:  # an ambiguous choice of provider: the system check names it
        return False


def _unserved(nodes: list[MovementRequestNode]) -> tuple[list, list]:
    served = [node for node in nodes if _served(node)]
    return served, [node for node in nodes if node not in served]


def _fail_at_dispatch(
    node: MovementRequestNode, error: str, actor: Actor, writes: RowWriter, **evidence: Any
) -> None:
    """READY -> FAILED before any prepare step (nothing was attempted), with the reason."""
    node.last_error = error
    set_node_state(
        node=node,
        new_state=NS.FAILED,
        actor=actor,
        detail={"phase": "dispatch", "error": error, **evidence},
        update_fields=["last_error"],
        writer=writes,
    )
    apply_request_state_from_nodes(node.request, actor=actor, writer=writes)


def _fail_unserved(nodes: list[MovementRequestNode], actor: Actor, writes: RowWriter) -> None:
    """READY nodes no executor serves: FAILED with the reason (nothing was attempted)."""
    for node in nodes:
        error = f"no executor is registered as {node.executor!r} in this deployment"
        _fail_at_dispatch(node, error, actor, writes)


def _guard(
    nodes: list[MovementRequestNode], actor: Actor, writes: RowWriter
) -> list[MovementRequestNode]:
    """What dispatch checks before it claims: the approvals still match the movement (a
    changed movement voids them and cannot start), and a side-effect node's destination is
    in the address book (the book may have changed since create): FAILED otherwise, and a
    destination still in its cool-down waits for it. Returns the nodes that may go on."""
    requests = list({node.request_id: node.request for node in nodes}.values())
    void = void_changed_approvals(requests, actor=actor, writer=writes)
    now = timezone.now()
    cleared = []
    for node in nodes:
        if error := void.get(node.request_id):
            _fail_at_dispatch(node, error, actor, writes, approval="missing or altered")
            continue
        if node.has_side_effect:
            standing, entry = standing_of(node.request, now)
            if standing == Standing.NOT_ALLOWLISTED:
                message = standing_message(node.request, standing, entry)
                _fail_at_dispatch(
                    node, message, actor, writes, destination=node.request.destination
                )
                continue
            if standing == Standing.COOLING_DOWN:
                node.next_attempt_at = entry.usable_from
                save_fields(node, ["next_attempt_at"], writer=writes)
                record_event(
                    request=node.request,
                    node=node,
                    actor=actor,
                    detail={"waiting": standing_message(node.request, standing, entry)},
                    writer=writes,
                )
                continue
        cleared.append(node)
    return cleared


def _park_unserved(nodes: list[MovementRequestNode], actor: Actor, writes: RowWriter) -> None:
    """Watched nodes no executor serves: money may be in flight, so nothing is concluded; a
    person is asked to look, and the node is not picked up again for a long while."""
    now = timezone.now()
    for node in nodes:
        node.next_attempt_at = now + timedelta(seconds=settings.QTG_RETRY_MAX_SECONDS)
        save_fields(node, ["next_attempt_at"], writer=writes)
        attention_raise(
            request=node.request,
            node=node,
            reason=AttentionReason.NO_EXECUTOR,
            message=f"no executor is registered as {node.executor!r} to watch "
            f"{node.node_key} ({node.node_state}): deploy it, or settle the node by hand",
            since=now,
            actor=actor,
            writer=writes,
        )


def _upstream_rows(*, requests: list[Any]):
    return (
        MovementRequestNode.objects.current()
        .filter(request_id__in=requests)
        .values_list("request_id", "node_key", "executor", "node_state", "external_ref", "result")
        .annotate(config=F("plan_node__config"))
    )


_UPSTREAM = Compiled(_upstream_rows, requests=MovementRequestNode._meta.get_field("request"))


def _upstream(nodes: list[MovementRequestNode]) -> dict[Any, dict[str, Upstream]]:
    """What the executors that look upstream need: the other current nodes of their requests,
    read with one query for the whole batch."""
    request_ids = {node.request_id for node in nodes if get_executor(node.executor).needs_upstream}
    upstream: dict[Any, dict[str, Upstream]] = {pk: {} for pk in request_ids}
    if not request_ids:
        return upstream
    rows = _UPSTREAM(requests=list(request_ids))
    for request_id, key, executor, state, external_ref, result, config in rows:
        upstream[request_id][key] = Upstream(
            executor=executor,
            state=state,
            external_ref=external_ref,
            result=dict(result or {}),
            config=dict(config or {}),
        )
    return upstream


def _context(
    node: MovementRequestNode, upstream: dict[str, Upstream], owner: str
) -> ExecutionContext:
    request = node.request
    return ExecutionContext(
        request_id=str(request.pk),
        node_id=node.pk,
        node_key=node.node_key,
        attempt=node.attempt,
        asset=request.asset,
        amount=request.amount,
        source=request.source,
        destination=request.destination,
        config=dict(node.plan_node.config or {}),
        params=dict(request.params or {}),
        idempotency_key=node.idempotency_key,
        signed_payload=node.signed_payload,
        external_ref=node.external_ref,
        result=dict(node.result or {}),
        upstream={k: v for k, v in upstream.items() if k != node.node_key},
        fence=Fence(node.pk, owner, node.lease_epoch),
    )


def _make_claims(nodes: list[MovementRequestNode], owner: str) -> list[Claim]:
    upstream = _upstream(nodes)
    return [
        Claim(
            node_id=node.pk,
            request_id=node.request_id,
            owner=owner,
            epoch=node.lease_epoch,
            state=NodeState(node.node_state),
            kind=node.kind,
            signing_required=node.signing_required,
            executor=get_executor(node.executor),
            context=_context(node, upstream.get(node.request_id, {}), owner),
            node=node,
            shares_side_effects=getattr(node, "shares_side_effects", True),
        )
        for node in nodes
    ]


def _lock_batch(
    states: tuple, request_states: tuple, as_of: Any, limit: int, actions: int | None = None
) -> list:
    """Lock up to ``limit`` due nodes (and their requests) in one statement, or, with
    ``actions``, up to that many action nodes in one and the rest of ``limit`` in other nodes
    in a second: nothing is locked that is not claimed, so another worker's claim meanwhile
    finds the action nodes left. Nodes of the same request share one request instance, so a
    request transition is seen by all of them."""
    now = as_of or timezone.now()
    if actions is None:
        nodes = list(_CLAIMABLE(states, request_states, max(1, limit), now=now))
    else:
        nodes = list(_CLAIMABLE(states, request_states, max(1, min(actions, limit)), True, now=now))
        if limit > len(nodes):
            nodes += _CLAIMABLE(states, request_states, limit - len(nodes), False, now=now)
    requests: dict[Any, MovementRequest] = {}
    for node in nodes:
        node.request = requests.setdefault(node.request_id, node.request)
    return nodes


@transaction.atomic
def claim_ready_nodes(
    *, owner: str, as_of: Any = None, limit: int = 1, actions: int | None = None
) -> list[Claim]:
    """Claim up to ``limit`` due READY nodes of APPROVED/EXECUTING requests in one transaction,
    no more than ``actions`` of them action nodes (None: any number): READY -> PREPARING for
    an action, READY -> OBSERVING for an observe node. The first dispatch of a request moves
    it APPROVED -> EXECUTING. Manual gates are never dispatched (an operator releases them)."""
    locked = _lock_batch((NS.READY,), DISPATCH_REQUEST_STATES, as_of, limit, actions)
    nodes, unserved = _unserved(locked)
    actor = worker_actor(owner)
    with batch() as writes:
        _fail_unserved(unserved, actor, writes)
        nodes = _guard(nodes, actor, writes)
        _claim_locked(nodes, owner, actor, writes)
    return _make_claims(nodes, owner)


def _claim_locked(
    nodes: list[MovementRequestNode], owner: str, actor: Actor, writes: RowWriter
) -> None:
    for node in nodes:
        request = node.request
        if request.request_state == RS.APPROVED:
            set_request_state(
                request=request,
                new_state=RS.EXECUTING,
                actor=actor,
                nodes=[],
                detail={"first_dispatch": node.node_key},
                writer=writes,
            )
        take_lease(node, owner)
        node.dispatch_count += 1
        node.next_attempt_at = None
        fields = [*LEASE_FIELDS, "dispatch_count", "next_attempt_at"]
        if node.kind == NodeKind.ACTION and not node.idempotency_key:
            # Persisted before anything is submitted, and sent to the venue with the submit.
            node.idempotency_key = attempt_idempotency_key(node)
            fields.append("idempotency_key")
        target = NS.OBSERVING if node.kind == NodeKind.OBSERVE else NS.PREPARING
        set_node_state(
            node=node,
            new_state=target,
            actor=actor,
            update_fields=fields,
            detail={"worker": owner, "dispatch": node.dispatch_count},
            writer=writes,
        )


def claim_ready_node(*, owner: str, as_of: Any = None) -> Claim | None:
    """Claim the next due READY node (see ``claim_ready_nodes``)."""
    claims = claim_ready_nodes(owner=owner, as_of=as_of, limit=1)
    return claims[0] if claims else None


@transaction.atomic
def _claim_watched(*, owner: str, states: tuple, as_of: Any, limit: int) -> list[Claim]:
    nodes, unserved = _unserved(_lock_batch(states, WATCH_REQUEST_STATES, as_of, limit))
    if unserved:
        with batch() as writes:
            _park_unserved(unserved, worker_actor(owner), writes)
    if not nodes:
        return []
    for node in nodes:
        take_lease(node, owner)
    # One lease for the whole batch, written in one statement (no state change); each row's
    # epoch grows by one, as ``take_lease`` counted it on the locked instance.
    save_leases(
        [node.pk for node in nodes],
        owner=owner,
        expires_at=nodes[0].lease_expires_at,
        heartbeat_at=nodes[0].heartbeat_at,
        new_epoch=True,
    )
    return _make_claims(nodes, owner)


def claim_observable_nodes(*, owner: str, as_of: Any = None, limit: int = 1) -> list[Claim]:
    """Lease up to ``limit`` due SUBMITTED/OBSERVING nodes (no state change: the observer
    does not pre-flip SUBMITTED rows, so SUBMITTED -> UNKNOWN stays a real edge)."""
    return _claim_watched(
        owner=owner, states=(NS.SUBMITTED, NS.OBSERVING), as_of=as_of, limit=limit
    )


def claim_unknown_nodes(*, owner: str, as_of: Any = None, limit: int = 1) -> list[Claim]:
    """Lease up to ``limit`` due UNKNOWN nodes for recovery."""
    return _claim_watched(owner=owner, states=(NS.UNKNOWN,), as_of=as_of, limit=limit)

"""The only writers of state. Each transition is validated against the tables, applied through
the generated django-fsm-2 method, saved, and audited by one MovementEvent in the same
transaction. An illegal transition raises and writes nothing.

The rows reach the database through a ``RowWriter`` (``movements.services.writers``): the
process's own, or the one a caller passes down as ``writer=``. A caller that holds every row
it changes locked opens ``batch()`` and passes its writer to each call: the changes are then
written together when the block ends (or when the caller flushes it before reading rows back).
"""

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from movements.fsm import transition_method_name
from movements.instruments import transition_committed
from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.services.effects import after_request_transition
from movements.services.writers import (
    DeferredWriter,
    RowChange,
    RowWriter,
    collecting_after_writes,
    row_writer,
)
from movements.states import (
    NodeState,
    RequestState,
    can_transition_node_state,
    can_transition_request_state,
)
from qtg.core.actors import Actor, resolve_actor
from qtg.core.errors import IllegalStateTransition


def record_event(
    *,
    request: MovementRequest,
    actor: Actor,
    node: MovementRequestNode | None = None,
    kind: str = MovementEvent.Kind.RECORD,
    old_state: str = "",
    new_state: str = "",
    detail: dict[str, Any] | None = None,
    writer: RowWriter | None = None,
) -> MovementEvent:
    """Append one audit record (evidence without a state change, unless a transition wrote it)."""
    event = _event(request, actor, node, kind, old_state, new_state, detail)
    (writer or row_writer()).write_event(event)
    return event


def _event(request, actor, node, kind, old_state, new_state, detail) -> MovementEvent:
    return MovementEvent(
        request=request,
        node=node,
        node_key=node.node_key if node is not None else "",
        kind=kind,
        old_state=old_state,
        new_state=new_state,
        actor_type=actor.type,
        actor_id=actor.id,
        detail=detail or {},
    )


@contextmanager
def batch() -> Iterator[RowWriter]:
    """A writer that holds the changes made through it until the block ends, then writes them
    together (see ``writers.DeferredWriter``). For callers that hold every row they change
    locked, inside their transaction, and read only those rows' instances until the block
    ends, or ``flush()`` the writer first. If the block raises, nothing queued is written."""
    if not connection.in_atomic_block:
        raise TransactionManagementError("batch() needs an open transaction")
    writes = DeferredWriter(row_writer())
    with collecting_after_writes() as run_after_writes:
        yield writes
        writes.flush()
        run_after_writes()


def save_fields(
    instance: MovementRequest | MovementRequestNode,
    fields: Iterable[str],
    *,
    writer: RowWriter | None = None,
) -> None:
    """Save bookkeeping ``fields`` (lease, polling, frontier; never the state) of a locked
    request or node, in one statement, refusing if its state changed since it was read."""
    state_field = "node_state" if isinstance(instance, MovementRequestNode) else "request_state"
    fields = list(fields)
    if state_field in fields:
        raise ValueError("state changes go through set_node_state / set_request_state")
    change = RowChange(
        instance, state_field, getattr(instance, state_field), (*fields, "updated_at")
    )
    (writer or row_writer()).write(change)


def save_leases(
    node_ids: Iterable[int],
    *,
    expires_at: Any,
    heartbeat_at: Any,
    owner: str | None = None,
    new_epoch: bool = False,
    writer: RowWriter | None = None,
) -> int:
    """Give nodes the caller holds locked one lease (``owner`` unchanged when None; with
    ``new_epoch`` each row's lease epoch grows by one), in one statement; no state changes.
    Returns how many rows were written."""
    values: dict[str, Any] = {"lease_expires_at": expires_at, "heartbeat_at": heartbeat_at}
    if owner is not None:
        values = {"lease_owner": owner, **values}
    if new_epoch:
        values["lease_epoch"] = F("lease_epoch") + 1
    values["updated_at"] = heartbeat_at
    return (writer or row_writer()).write_same(MovementRequestNode, node_ids, values)


def set_node_state(
    node: MovementRequestNode,
    new_state: NodeState | str,
    *,
    actor: Actor | None = None,
    actor_type: str | None = None,
    actor_id: str | None = None,
    detail: dict[str, Any] | None = None,
    update_fields: Iterable[str] = (),
    only_if: dict[str, Any] | None = None,
    unless_exists: Any = None,
    writer: RowWriter | None = None,
    savepoint: bool = True,
) -> MovementEvent:
    """Move one node along an edge of NODE_TRANSITIONS and audit it.

    The caller holds the node's row lock; ``update_fields`` names other fields it changed on
    the instance that must be saved with the state. The actor is an ``Actor`` or the spec's
    ``actor_type``/``actor_id`` pair.

    Without the lock, ``only_if`` makes the write a compare-and-set: it happens only if the
    row is still in the state read and has these field values (a worker's lease), and raises
    StaleState otherwise. On PostgreSQL, outside a transaction, that is one statement.
    ``unless_exists`` (a queryset, with ``only_if`` only) adds a condition to it: that
    queryset finds no row, read in the same statement.
    Inside the caller's transaction it gets a savepoint, so losing it does not doom the rest;
    a caller whose transaction has nothing else to lose passes ``savepoint=False``.
    """
    started = time.perf_counter()
    actor = resolve_actor(actor, actor_type, actor_id)
    old_state = node.node_state
    try:
        target = NodeState(new_state)
    except ValueError:
        target = None
    if target is None or not can_transition_node_state(old_state, target):
        raise IllegalStateTransition(
            subject=f"node {node.node_key}", current=old_state, target=str(new_state)
        )
    if unless_exists is not None and only_if is None:
        raise ValueError("unless_exists guards a compare-and-set: give only_if too")
    writer = writer or row_writer()
    if only_if is not None:
        # A compare-and-set is written at once, against the rows as written so far: what the
        # writer holds is written first, outside the savepoint that losing rolls back.
        writer.flush()
    # Validated before the transaction opens, so a refusal never poisons the caller's.
    with _atomic_write(writer, savepoint=only_if is not None and savepoint):
        getattr(node, transition_method_name(target))()
        node.state_changed_at = timezone.now()
        event = _event(
            node.request, actor, node, MovementEvent.Kind.TRANSITION, old_state, target, detail
        )
        fields = ("node_state", "state_changed_at", "updated_at", *update_fields)
        change = RowChange(node, "node_state", old_state, fields, only_if, unless_exists)
        writer.write(change, event)
        _announce(node.request_id, node.node_key, node.attempt, old_state, target, actor, started)
        return event


def _announce(movement_id, node_key, attempt, old_state, new_state, actor, started) -> None:
    """Log and count the transition once it is committed (never one that was rolled back)."""
    transaction.on_commit(
        partial(
            transition_committed,
            subject="node" if node_key else "request",
            movement_id=movement_id,
            node_key=node_key,
            attempt=attempt,
            old_state=old_state,
            new_state=new_state,
            actor=actor,
            seconds=time.perf_counter() - started,
        )
    )


def _atomic_write(writer: RowWriter, *, savepoint: bool) -> Any:
    """A write that is a single statement (PostgreSQL's writer) is atomic by itself: alone, it
    needs no transaction (two round trips more). Inside the caller's transaction, a
    compare-and-set the caller may lose gets a savepoint, so losing it does not doom the rest
    of that transaction."""
    if not connection.in_atomic_block:
        return nullcontext() if writer.atomic_alone else transaction.atomic()
    return transaction.atomic(savepoint=savepoint)


def set_request_state(
    request: MovementRequest,
    new_state: RequestState | str,
    *,
    actor: Actor | None = None,
    actor_type: str | None = None,
    actor_id: str | None = None,
    detail: dict[str, Any] | None = None,
    nodes: list[MovementRequestNode] | None = None,
    update_fields: Iterable[str] = (),
    writer: RowWriter | None = None,
) -> MovementEvent:
    """Move a request along an edge of REQUEST_TRANSITIONS, audit it and apply the
    post-transition table (reservation effect, callback, frontier cleared on COMPLETED).

    The caller holds the request's row lock.
    """
    started = time.perf_counter()
    actor = resolve_actor(actor, actor_type, actor_id)
    old_state = request.request_state
    try:
        target = RequestState(new_state)
    except ValueError:
        target = None
    if target is None or not can_transition_request_state(old_state, target):
        raise IllegalStateTransition(subject="request", current=old_state, target=str(new_state))
    writer = writer or row_writer()
    with transaction.atomic(savepoint=False):
        getattr(request, transition_method_name(target))()
        fields = ["request_state", "state_changed_at", "updated_at", *update_fields]
        request.state_changed_at = timezone.now()
        if target == RequestState.COMPLETED:
            request.current_frontier = []
            fields.append("current_frontier")
        event = _event(
            request, actor, None, MovementEvent.Kind.TRANSITION, old_state, target, detail
        )
        writer.write(RowChange(request, "request_state", old_state, tuple(fields)), event)
        _announce(request.pk, "", None, old_state, target, actor, started)
        if nodes is None:
            writer.flush()
            nodes = list(MovementRequestNode.objects.current().filter(request=request))
        after_request_transition(
            request=request,
            old_state=old_state,
            new_state=target,
            nodes=nodes,
            actor=actor,
            detail=detail,
        )
        return event

"""The only writers of state. Each transition is validated against the tables, applied through
the generated django-fsm-2 method, saved, and audited by one MovementEvent in the same
transaction. An illegal transition raises and writes nothing."""

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from django.db import connection, transaction
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from movements.fsm import transition_method_name
from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.services.effects import after_request_transition
from movements.states import (
    NodeState,
    RequestState,
    can_transition_node_state,
    can_transition_request_state,
)
from qtg.core.actors import Actor, resolve_actor
from qtg.core.errors import IllegalStateTransition, StaleState


def record_event(
    *,
    request: MovementRequest,
    actor: Actor,
    node: MovementRequestNode | None = None,
    kind: str = MovementEvent.Kind.RECORD,
    old_state: str = "",
    new_state: str = "",
    detail: dict[str, Any] | None = None,
) -> MovementEvent:
    """Append one audit record (evidence without a state change, unless a transition wrote it)."""
    event = _event(request, actor, node, kind, old_state, new_state, detail)
    deferred = _DEFERRED.get()
    if deferred is not None:
        deferred.events.append(event)
        return event
    with connection.cursor() as cursor:
        cursor.execute(_EVENT_INSERT, _event_row(event))
        event.pk = cursor.fetchone()[0]
    event._state.adding = False
    return event


# --- the write of one transition --------------------------------------------------------------
#
# A transition is written as one guarded UPDATE of the locked row (``WHERE id = .. AND state =
# <the state we read>``, the optimistic check django-fsm-2's ConcurrentTransitionMixin makes)
# and the INSERT of its audit event. On PostgreSQL both are one statement (a data-modifying
# CTE), so a transition costs one round trip, and the event exists only if the row changed.
# Values go through each field's own ``pre_save``/``get_db_prep_save``, exactly as ``save()``
# would convert them; the statements are written once per field list, not compiled per call.

_EVENT_TABLE = connection.ops.quote_name(MovementEvent._meta.db_table)
_EVENT_PK = connection.ops.quote_name(MovementEvent._meta.pk.column)
_EVENT_FIELDS = [f for f in MovementEvent._meta.concrete_fields if not f.primary_key]
_EVENT_COLUMNS = ", ".join(connection.ops.quote_name(f.column) for f in _EVENT_FIELDS)
_EVENT_INSERT = (
    f"INSERT INTO {_EVENT_TABLE} ({_EVENT_COLUMNS}) "
    f"VALUES ({', '.join(['%s'] * len(_EVENT_FIELDS))}) RETURNING {_EVENT_PK}"
)


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


def _event_row(event: MovementEvent) -> list[Any]:
    """The event's column values, converted as ``save()`` would, in ``_EVENT_FIELDS`` order."""
    return [f.get_db_prep_save(f.pre_save(event, True), connection) for f in _EVENT_FIELDS]


_SQL_CACHE: dict[tuple, tuple[str, ...]] = {}


def _update_sql(
    model: type, columns: tuple[str, ...], guard_columns: tuple[str, ...], *, event: bool
) -> tuple[str, ...]:
    key = (model, columns, guard_columns, event)
    sql = _SQL_CACHE.get(key)
    if sql is None:
        qn = connection.ops.quote_name
        table = qn(model._meta.db_table)
        assignments = ", ".join(f"{qn(c)} = %s" for c in columns)
        guards = " AND ".join(f"{qn(c)} = %s" for c in guard_columns)
        update = f"UPDATE {table} SET {assignments} WHERE {guards}"
        if not event:
            sql = (update,)
        elif connection.vendor == "postgresql":
            # Typed placeholders: INSERT .. SELECT does not infer the types of bare literals.
            typed = ", ".join(f"%s::{f.db_type(connection)}" for f in _EVENT_FIELDS)
            sql = (
                f"WITH changed AS ({update} RETURNING 1) "
                f"INSERT INTO {_EVENT_TABLE} ({_EVENT_COLUMNS}) SELECT {typed} FROM changed "
                f"RETURNING {_EVENT_PK}",
            )
        else:
            sql = (update, _EVENT_INSERT)
        _SQL_CACHE[key] = sql
    return sql


def _row_update(
    instance: Any,
    state_field: str,
    read_state: str,
    fields: Iterable[str],
    only_if: dict[str, Any] | None,
) -> tuple[tuple[type, tuple[str, ...], tuple[str, ...]], list[Any]]:
    """The guarded UPDATE of ``fields`` of one row: its statement's key and its parameters."""
    meta = type(instance)._meta
    columns, values = [], []
    for name in dict.fromkeys(fields):
        field = meta.get_field(name)
        columns.append(field.column)
        values.append(field.get_db_prep_save(field.pre_save(instance, False), connection))
    conditions = {meta.pk.attname: instance.pk, state_field: read_state, **(only_if or {})}
    guard_columns, guard = [], []
    for name, value in conditions.items():
        field = meta.get_field(name)
        guard_columns.append(field.column)
        guard.append(field.get_db_prep_value(value, connection))
    return (type(instance), tuple(columns), tuple(guard_columns)), [*values, *guard]


def _guarded_update(
    instance: Any,
    state_field: str,
    read_state: str,
    fields: Iterable[str],
    event: MovementEvent | None,
    only_if: dict[str, Any] | None = None,
) -> None:
    """Save ``fields`` of ``instance`` if its row is still in ``read_state``, the state we
    read it in, and matches ``only_if`` (and insert ``event`` with it); raise StaleState,
    writing nothing, if another writer changed it. Inside ``deferred_writes`` the write is
    queued instead (a compare-and-set, ``only_if``, never is: its caller wants the answer)."""
    deferred = _DEFERRED.get()
    if deferred is not None and only_if is None:
        deferred.add(instance, state_field, read_state, fields, event)
        return
    key, params = _row_update(instance, state_field, read_state, fields, only_if)
    sql = _update_sql(*key, event=event is not None)
    row: Any = None
    with connection.cursor() as cursor:
        if event is None:
            cursor.execute(sql[0], params)
            row = () if cursor.rowcount == 1 else None
        elif len(sql) == 1:
            cursor.execute(sql[0], [*params, *_event_row(event)])
            row = cursor.fetchone()
        else:
            cursor.execute(sql[0], params)
            if cursor.rowcount == 1:
                cursor.execute(sql[1], _event_row(event))
                row = cursor.fetchone()
    if row is None:
        # Another writer moved the row since we read it. Nothing of this change is written.
        raise StaleState(f"{instance} was changed by someone else; reload and try again")
    if event is not None:
        event.pk = row[0]
        event._state.adding = False
    instance._update_initial_state()  # as django-fsm-2's save() does after a write


# --- deferred writes --------------------------------------------------------------------------
#
# A worker applying a batch of results holds the rows locked for the whole transaction and
# reads only the instances it locked. Inside ``deferred_writes`` each transition is validated
# and applied to its instance at once, but the rows are written when the block ends: the
# guarded UPDATEs of each shape in one pipelined executemany, every audit event in one INSERT,
# in the order they happened. A row whose state another writer changed fails the whole block
# with StaleState, so the transaction rolls back as it would have at the first write.


class _Deferred:
    def __init__(self) -> None:
        # (model, pk) -> [instance, state field, state read from the database, fields]
        self.rows: dict[tuple[type, Any], list[Any]] = {}
        self.events: list[MovementEvent] = []

    def add(self, instance, state_field, read_state, fields, event) -> None:
        key = (type(instance), instance.pk)
        entry = self.rows.get(key)
        if entry is not None and entry[0] is not instance:
            self.flush()  # another copy of the same row: write the first one's change first
            entry = None
        if entry is None:
            self.rows[key] = [instance, state_field, read_state, dict.fromkeys(fields)]
        else:
            entry[3].update(dict.fromkeys(fields))  # the state read first stays the guard
        if event is not None:
            self.events.append(event)

    def flush(self) -> None:
        rows, events = list(self.rows.values()), self.events
        self.rows, self.events = {}, []
        statements: dict[tuple, list[list[Any]]] = {}
        for instance, state_field, read_state, fields in rows:
            key, params = _row_update(instance, state_field, read_state, fields, None)
            statements.setdefault(key, []).append(params)
        with connection.cursor() as cursor:
            for key, param_list in statements.items():
                cursor.executemany(_update_sql(*key, event=False)[0], param_list)
                if cursor.rowcount != len(param_list):
                    # Another writer moved one of these rows since we read it.
                    raise StaleState(
                        f"{cursor.rowcount} of {len(param_list)} {key[0]._meta.verbose_name} "
                        f"rows were still as read; reload and try again"
                    )
        if events:
            MovementEvent.objects.bulk_create(events)
        for instance, *_ in rows:
            instance._update_initial_state()


_DEFERRED: ContextVar[_Deferred | None] = ContextVar("qtg_deferred_writes", default=None)


@contextmanager
def deferred_writes() -> Iterator[None]:
    """Write the state changes made in the block when it ends (see above). For callers that
    hold every row they change locked, inside their transaction, and read only those rows'
    instances until the block ends."""
    if not connection.in_atomic_block:
        raise TransactionManagementError("deferred_writes() needs an open transaction")
    deferred = _Deferred()
    token = _DEFERRED.set(deferred)
    try:
        yield
        deferred.flush()
    finally:
        _DEFERRED.reset(token)


def flush_deferred_writes() -> None:
    """Write what ``deferred_writes`` queued so far (before reading those rows back)."""
    deferred = _DEFERRED.get()
    if deferred is not None:
        deferred.flush()


def save_fields(instance: MovementRequest | MovementRequestNode, fields: Iterable[str]) -> None:
    """Save bookkeeping ``fields`` (lease, polling, frontier; never the state) of a locked
    request or node, in one statement, refusing if its state changed since it was read."""
    state_field = "node_state" if isinstance(instance, MovementRequestNode) else "request_state"
    if state_field in fields:
        raise ValueError("state changes go through set_node_state / set_request_state")
    state = getattr(instance, state_field)
    _guarded_update(instance, state_field, state, [*fields, "updated_at"], None)


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
) -> MovementEvent:
    """Move one node along an edge of NODE_TRANSITIONS and audit it.

    The caller holds the node's row lock; ``update_fields`` names other fields it changed on
    the instance that must be saved with the state. The actor is an ``Actor`` or the spec's
    ``actor_type``/``actor_id`` pair.

    Without the lock, ``only_if`` makes the write a compare-and-set: it happens only if the
    row is still in the state read and has these field values (a worker's lease), and raises
    StaleState otherwise. On PostgreSQL, outside a transaction, that is one statement.
    """
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
    # Validated before the transaction opens, so a refusal never poisons the caller's.
    with _atomic_write(savepoint=only_if is not None):
        getattr(node, transition_method_name(target))()
        node.state_changed_at = timezone.now()
        event = _event(
            node.request, actor, node, MovementEvent.Kind.TRANSITION, old_state, target, detail
        )
        fields = ["node_state", "state_changed_at", "updated_at", *update_fields]
        _guarded_update(node, "node_state", old_state, fields, event, only_if)
        return event


def _atomic_write(*, savepoint: bool) -> Any:
    """The write of one node transition is a single statement on PostgreSQL, atomic by
    itself: alone, it needs no transaction (two round trips more). Inside the caller's
    transaction, a compare-and-set the caller may lose gets a savepoint, so losing it does
    not doom the rest of that transaction."""
    if not connection.in_atomic_block:
        return nullcontext() if connection.vendor == "postgresql" else transaction.atomic()
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
) -> MovementEvent:
    """Move a request along an edge of REQUEST_TRANSITIONS, audit it and apply the
    post-transition table (reservation effect, callback, frontier cleared on COMPLETED).

    The caller holds the request's row lock.
    """
    actor = resolve_actor(actor, actor_type, actor_id)
    old_state = request.request_state
    try:
        target = RequestState(new_state)
    except ValueError:
        target = None
    if target is None or not can_transition_request_state(old_state, target):
        raise IllegalStateTransition(subject="request", current=old_state, target=str(new_state))
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
        _guarded_update(request, "request_state", old_state, fields, event)
        if nodes is None:
            flush_deferred_writes()
            nodes = list(MovementRequestNode.objects.current().filter(request=request))
        after_request_transition(
            request=request, old_state=old_state, new_state=target, nodes=nodes, actor=actor
        )
        return event

"""How the rows of movement requests and nodes, and their audit events, reach the database.

``movements.services.state`` validates every change and builds its audit event; a
``RowWriter`` writes it. Every write is guarded: a row is updated only if it is still in the
state it was read in (``WHERE id = .. AND state = <the state we read>``, the optimistic check
django-fsm-2's ConcurrentTransitionMixin makes), and a transition's event is inserted only if
its row changed. A row another writer moved raises StaleState and nothing of the change is
written. Values go through each field's own ``pre_save``/``get_db_prep_save``, exactly as
``save()`` would convert them.

Two writers, one chosen per process at start-up (``QTG_ROW_WRITER``: ``auto``, ``orm``,
``postgresql``; ``auto`` picks by the database):

- ``OrmRowWriter``, portable (SQLite and PostgreSQL): a guarded
  ``QuerySet.filter(pk=.., state=..).update(..)`` and the event's ``save()``.
- ``PostgresRowWriter``: a transition is one statement (a data-modifying CTE: the guarded
  UPDATE and the INSERT of its event), so it costs one round trip and the event exists only if
  the row changed; a batch sends the guarded UPDATEs of each shape in one pipelined
  ``executemany``. The statements are written once per field list, not compiled per call.

Every writer gives each event its audit chain hash (movements/audit.py) just before the
insert, with one query for the previous hashes of the movements concerned.

``DeferredWriter`` (what ``state.batch()`` hands out) queues the changes of a batch and gives
them to the process's writer together when asked to flush.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Exists

from movements.audit import chain_events
from movements.models import MovementEvent
from qtg.core.compiled import Bound
from qtg.core.errors import StaleState

_AFTER_WRITES: ContextVar[list[Callable[[], Any]] | None] = ContextVar(
    "qtg_after_writes", default=None
)


def after_writes(hook: Callable[[], Any]) -> None:
    """Run ``hook`` once the rows written so far are in the database: now, or, inside a
    ``state.batch()``, when the batch has flushed (still in its transaction). For readers of
    the rows just changed, e.g. the callback outbox building a movement's payload."""
    pending = _AFTER_WRITES.get()
    if pending is None:
        hook()
    else:
        pending.append(hook)


class _HookGroup:
    """The items of one ``after_writes_together`` function, handed to it in one call."""

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self.fn = fn
        self.items: list[Any] = []

    def __call__(self) -> None:
        self.fn(self.items)


def after_writes_together(
    fn: Callable[[list[Any]], Any], item: Any, *, first: bool = False
) -> None:
    """``after_writes`` for hooks that do better together (one read for many movements):
    every ``item`` given with the same ``fn`` before the hooks run reaches ``fn`` in one
    list, in order, where the first one would have run, or before every other hook when
    ``first`` (what the others read, e.g. a settled reservation a callback payload shows).
    Outside a batch: now, alone."""
    pending = _AFTER_WRITES.get()
    if pending is None:
        fn([item])
        return
    group = next((h for h in pending if isinstance(h, _HookGroup) and h.fn is fn), None)
    if group is None:
        group = _HookGroup(fn)
        if first:
            pending.insert(0, group)
        else:
            pending.append(group)
    group.items.append(item)


@contextmanager
def collecting_after_writes() -> Iterator[Callable[[], None]]:
    """Collect ``after_writes`` hooks; the caller runs them (in order) after flushing."""
    pending: list[Callable[[], Any]] = []
    token = _AFTER_WRITES.set(pending)

    def run() -> None:
        _AFTER_WRITES.set(None)  # hooks that write state again write at once
        while pending:
            pending.pop(0)()

    try:
        yield run
    finally:
        _AFTER_WRITES.reset(token)


@dataclass(frozen=True)
class RowChange:
    """Save ``fields`` of ``instance`` if its row is still in ``read_state`` (its
    ``state_field`` as read from the database), has the values of ``only_if`` and, for a
    compare-and-set, ``unless_exists`` finds no row, in the same statement: a queryset, or
    a ``qtg.core.compiled.Bound`` one (PostgreSQL's writer then sends its compiled SQL)."""

    instance: Any
    state_field: str
    read_state: str
    fields: tuple[str, ...]
    only_if: Mapping[str, Any] | None = None
    unless_exists: Any = None


def _stale(instance: Any) -> StaleState:
    # Another writer moved the row since we read it. Nothing of this change is written.
    return StaleState(f"{instance} was changed by someone else; reload and try again")


class RowWriter(ABC):
    """Writes guarded row changes and audit events (see the module docstring)."""

    name: str = ""
    # Whether one ``write`` is atomic by itself (one statement), needing no transaction.
    atomic_alone: bool = False

    @abstractmethod
    def write(self, change: RowChange, event: MovementEvent | None = None) -> None:
        """Write ``change`` (and insert ``event`` with it), or raise StaleState writing
        nothing."""

    @abstractmethod
    def write_event(self, event: MovementEvent) -> None:
        """Insert one audit event (evidence without a state change)."""

    @abstractmethod
    def write_batch(self, changes: Sequence[RowChange], events: Sequence[MovementEvent]) -> None:
        """Write ``changes`` (never compare-and-sets) and then ``events`` in their order; raise
        StaleState if any row was changed by someone else (the caller's transaction rolls
        back)."""

    def write_same(self, model: type, pks: Iterable[Any], values: Mapping[str, Any]) -> int:
        """Give several rows the caller holds locked the same bookkeeping values (a lease),
        in one statement, with no state guard; returns how many rows were written."""
        return model._base_manager.filter(pk__in=list(pks)).update(**values)

    def flush(self) -> None:  # noqa: B027 (a hook: only a deferring writer queues)
        """Write what is queued; a writer that writes at once has nothing queued."""


class OrmRowWriter(RowWriter):
    """Django's ORM, on any database it supports."""

    name = "orm"

    def write(self, change: RowChange, event: MovementEvent | None = None) -> None:
        self._update(change)
        if event is not None:
            chain_events([event])
            event.save(force_insert=True)
        change.instance._update_initial_state()  # as django-fsm-2's save() does after a write

    def write_event(self, event: MovementEvent) -> None:
        chain_events([event])
        event.save(force_insert=True)

    def write_batch(self, changes: Sequence[RowChange], events: Sequence[MovementEvent]) -> None:
        for change in changes:
            self._update(change)
        if events:
            chain_events(events)
            MovementEvent.objects.bulk_create(events)
        for change in changes:
            change.instance._update_initial_state()

    def _update(self, change: RowChange) -> None:
        instance = change.instance
        meta = type(instance)._meta
        values = {}
        for name in dict.fromkeys(change.fields):
            field = meta.get_field(name)
            values[field.attname] = field.pre_save(instance, False)
        guard = {
            meta.pk.attname: instance.pk,
            change.state_field: change.read_state,
            **(change.only_if or {}),
        }
        rows = type(instance)._base_manager.filter(**guard)
        if (unless := change.unless_exists) is not None:
            rows = rows.filter(~Exists(unless.queryset() if isinstance(unless, Bound) else unless))
        if rows.update(**values) != 1:
            raise _stale(instance)


class PostgresRowWriter(RowWriter):
    """Hand-written statements for PostgreSQL: one per transition, pipelined per batch."""

    name = "postgresql"
    atomic_alone = True

    def __init__(self) -> None:
        qn = connection.ops.quote_name
        self._event_fields = [f for f in MovementEvent._meta.concrete_fields if not f.primary_key]
        self._event_table = qn(MovementEvent._meta.db_table)
        self._event_pk = qn(MovementEvent._meta.pk.column)
        self._event_columns = ", ".join(qn(f.column) for f in self._event_fields)
        self._event_insert = (
            f"INSERT INTO {self._event_table} ({self._event_columns}) "
            f"VALUES ({', '.join(['%s'] * len(self._event_fields))}) RETURNING {self._event_pk}"
        )
        self._sql: dict[tuple, str] = {}

    def _event_row(self, event: MovementEvent) -> list[Any]:
        """The event's column values, converted as ``save()`` would."""
        return [f.get_db_prep_save(f.pre_save(event, True), connection) for f in self._event_fields]

    def _statement(
        self,
        model: type,
        columns: tuple[str, ...],
        guard_columns: tuple[str, ...],
        unless_sql: str,
        event: bool,
    ) -> str:
        key = (model, columns, guard_columns, unless_sql, event)
        sql = self._sql.get(key)
        if sql is None:
            qn = connection.ops.quote_name
            assignments = ", ".join(f"{qn(c)} = %s" for c in columns)
            guards = " AND ".join(f"{qn(c)} = %s" for c in guard_columns)
            if unless_sql:
                guards += f" AND NOT EXISTS ({unless_sql})"
            sql = f"UPDATE {qn(model._meta.db_table)} SET {assignments} WHERE {guards}"
            if event:
                # Typed placeholders: INSERT .. SELECT does not infer the types of bare literals.
                typed = ", ".join(f"%s::{f.db_type(connection)}" for f in self._event_fields)
                sql = (
                    f"WITH changed AS ({sql} RETURNING 1) "
                    f"INSERT INTO {self._event_table} ({self._event_columns}) "
                    f"SELECT {typed} FROM changed RETURNING {self._event_pk}"
                )
            self._sql[key] = sql
        return sql

    @staticmethod
    def _row_update(change: RowChange) -> tuple[tuple, list[Any]]:
        """The guarded UPDATE of one row: its statement's key and its parameters."""
        instance = change.instance
        meta = type(instance)._meta
        columns, values = [], []
        for name in dict.fromkeys(change.fields):
            field = meta.get_field(name)
            columns.append(field.column)
            values.append(field.get_db_prep_save(field.pre_save(instance, False), connection))
        conditions = {
            meta.pk.attname: instance.pk,
            change.state_field: change.read_state,
            **(change.only_if or {}),
        }
        guard_columns, guard = [], []
        for name, value in conditions.items():
            field = meta.get_field(name)
            guard_columns.append(field.column)
            guard.append(field.get_db_prep_value(value, connection))
        unless_sql, unless_params = "", ()
        if isinstance(change.unless_exists, Bound):
            unless_sql, unless_params = change.unless_exists.sql()
        elif change.unless_exists is not None:
            query = change.unless_exists.values("pk").query
            unless_sql, unless_params = query.get_compiler(connection=connection).as_sql()
        key = (type(instance), tuple(columns), tuple(guard_columns), unless_sql)
        return key, [*values, *guard, *unless_params]

    def write(self, change: RowChange, event: MovementEvent | None = None) -> None:
        key, params = self._row_update(change)
        with connection.cursor() as cursor:
            if event is None:
                cursor.execute(self._statement(*key, event=False), params)
                row = () if cursor.rowcount == 1 else None
            else:
                chain_events([event])
                params = [*params, *self._event_row(event)]
                cursor.execute(self._statement(*key, event=True), params)
                row = cursor.fetchone()
        if row is None:
            raise _stale(change.instance)
        if event is not None:
            event.pk = row[0]
            event._state.adding = False
        change.instance._update_initial_state()  # as django-fsm-2's save() does after a write

    def write_event(self, event: MovementEvent) -> None:
        chain_events([event])
        with connection.cursor() as cursor:
            cursor.execute(self._event_insert, self._event_row(event))
            event.pk = cursor.fetchone()[0]
        event._state.adding = False

    def write_batch(self, changes: Sequence[RowChange], events: Sequence[MovementEvent]) -> None:
        statements: dict[tuple, list[list[Any]]] = {}
        for change in changes:
            key, params = self._row_update(change)
            statements.setdefault(key, []).append(params)
        with connection.cursor() as cursor:
            for key, param_list in statements.items():
                cursor.executemany(self._statement(*key, event=False), param_list)
                if cursor.rowcount != len(param_list):
                    # Another writer moved one of these rows since we read it.
                    raise StaleState(
                        f"{cursor.rowcount} of {len(param_list)} {key[0]._meta.verbose_name} "
                        f"rows were still as read; reload and try again"
                    )
        if events:
            chain_events(events)
            MovementEvent.objects.bulk_create(events)
        for change in changes:
            change.instance._update_initial_state()


class DeferredWriter(RowWriter):
    """The writes of a batch, queued and handed to ``backend`` together on ``flush``.

    Each change is validated and applied to its instance at once by ``state``; the rows are
    written when the batch is flushed: every guarded UPDATE, then every audit event, in the
    order they happened. Two changes of one instance are one row update (the state read first
    stays the guard). A compare-and-set, whose caller wants the answer, and a bookkeeping write
    of several rows are never queued: what is queued is written first.
    """

    def __init__(self, backend: RowWriter) -> None:
        self.backend = backend
        # (model, pk) -> [instance, state field, state read from the database, fields]
        self._rows: dict[tuple[type, Any], list[Any]] = {}
        self._events: list[MovementEvent] = []

    def write(self, change: RowChange, event: MovementEvent | None = None) -> None:
        if change.only_if is not None:
            self.flush()
            self.backend.write(change, event)
            return
        instance = change.instance
        key = (type(instance), instance.pk)
        entry = self._rows.get(key)
        if entry is not None and entry[0] is not instance:
            self.flush()  # another copy of the same row: write the first one's change first
            entry = None
        if entry is None:
            self._rows[key] = [instance, change.state_field, change.read_state, {}]
            entry = self._rows[key]
        entry[3].update(dict.fromkeys(change.fields))
        if event is not None:
            self._events.append(event)

    def write_event(self, event: MovementEvent) -> None:
        self._events.append(event)

    def write_batch(self, changes: Sequence[RowChange], events: Sequence[MovementEvent]) -> None:
        for change in changes:
            self.write(change)
        self._events.extend(events)

    def write_same(self, model: type, pks: Iterable[Any], values: Mapping[str, Any]) -> int:
        self.flush()
        return self.backend.write_same(model, pks, values)

    def flush(self) -> None:
        rows, events = list(self._rows.values()), self._events
        self._rows, self._events = {}, []
        if not rows and not events:
            return
        changes = [
            RowChange(instance, state_field, read_state, tuple(fields))
            for instance, state_field, read_state, fields in rows
        ]
        self.backend.write_batch(changes, events)


WRITERS: dict[str, type[RowWriter]] = {
    OrmRowWriter.name: OrmRowWriter,
    PostgresRowWriter.name: PostgresRowWriter,
}

_writer: RowWriter | None = None


def make_row_writer(name: str) -> RowWriter:
    """A writer by name (``auto`` picks the database's own: PostgreSQL's, else the ORM's)."""
    if name == "auto":
        name = PostgresRowWriter.name if connection.vendor == "postgresql" else OrmRowWriter.name
    if name not in WRITERS:
        raise ImproperlyConfigured(
            f"QTG_ROW_WRITER is {name!r}: one of auto, {', '.join(sorted(WRITERS))}"
        )
    if name == PostgresRowWriter.name and connection.vendor != "postgresql":
        raise ImproperlyConfigured(f"QTG_ROW_WRITER=postgresql on a {connection.vendor} database")
    return WRITERS[name]()


def row_writer() -> RowWriter:
    """The process's writer, chosen once (``QTG_ROW_WRITER``)."""
    global _writer
    if _writer is None:
        _writer = make_row_writer(settings.QTG_ROW_WRITER)
    return _writer


def use_row_writer(writer: RowWriter) -> RowWriter:
    """Make ``writer`` the process's writer; returns the one it replaces (a test comparing
    writers puts it back)."""
    global _writer
    previous, _writer = row_writer(), writer
    return previous

"""Querysets compiled once and run again with new values, for the reads every approve, claim
and result sends: building and compiling their SQL through the ORM costs more than running it
(a movement read for a decision with its creator, reservation, policy, newest event and open
attention: 2.7 ms of CPU through the ORM, 0.4 ms compiled).

``Compiled(build, pk=MovementRequest._meta.pk)`` holds a function that builds the queryset from
keyword values (the *markers*). On first use on a database connection it builds it once with a
sample value for each marker, compiles it, and finds where each sample landed among the
statement's parameters. Every later call runs that SQL with the call's values in those places,
through the queryset's own iterable: model instances with their ``select_related`` objects and
annotations, or ``values_list`` rows, exactly as iterating the queryset would give them. A
marker must reach the SQL as parameters of its field's type (``pk=...``, ``field__lte=...``),
or as a list (``pk__in=...``: compiled once for each length it comes with); what else changes
the SQL (a ``LIMIT``, the states a claim takes) is the queryset's *variant* (positional
arguments, one compiled statement each)."""

import copy
import random
import uuid
import weakref
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.transaction import TransactionManagementError

from qtg.core.keyed import value_field


def _sample(field: models.Field) -> Any:
    """A value of ``field``'s type that no real parameter of the statement will equal."""
    kind = field.get_internal_type()
    if kind == "UUIDField":
        return uuid.uuid4()
    if kind == "DateTimeField":
        return datetime(1901, 1, 1, tzinfo=UTC) + timedelta(microseconds=random.randrange(10**12))
    if kind in ("AutoField", "BigAutoField", "IntegerField", "BigIntegerField"):
        return -random.randrange(10**12, 10**13)
    if kind in ("CharField", "TextField"):
        return f"qtg-compiled-marker-{uuid.uuid4().hex}"
    raise TypeError(f"Compiled: no sample for a {kind} marker")


Shape = tuple[tuple[str, int | None], ...]


class _Statement:
    """One compiled variant on one connection: its compiled queryset, SQL, parameters and
    where each marker's value (each element of a list marker's) goes."""

    def __init__(self, queryset: models.QuerySet, samples: dict[str, Any], fields) -> None:
        self.queryset = queryset
        self.compiler = queryset.query.get_compiler(using=queryset.db)
        self.sql, params = self.compiler.as_sql()
        self.params = list(params)
        self.fields = fields
        self.positions: dict[tuple[str, int | None], list[int]] = {}
        for slot, sample in _slots(samples):
            prepared = self._prepare(slot[0], sample)
            found = [
                i
                for i, value in enumerate(self.params)
                if type(value) is type(prepared) and value == prepared
            ]
            if not found:
                raise ValueError(f"Compiled: the marker {slot} is not a parameter of {self.sql}")
            self.positions[slot] = found

    def _prepare(self, name: str, value: Any) -> Any:
        return self.fields[name].get_db_prep_value(value, self.compiler.connection)

    def params_for(self, values: dict[str, Any]) -> list:
        """The statement's parameters with each marker's value of this call in its places."""
        params = list(self.params)
        for slot, value in _slots(values):
            prepared = self._prepare(slot[0], value)
            for i in self.positions[slot]:
                params[i] = prepared
        return params

    def run(self, values: dict[str, Any]) -> list:
        connection = self.compiler.connection
        features = connection.features
        if (
            # The ORM's own refusal, where it makes one (SQLite has no row locks to take).
            self.queryset.query.select_for_update
            and features.has_select_for_update
            and features.supports_transactions
            and connection.get_autocommit()
        ):
            raise TransactionManagementError(
                "select_for_update cannot be used outside of a transaction."
            )
        params = self.params_for(values)
        compiler = copy.copy(self.compiler)
        compiler.as_sql = lambda *args, **kwargs: (self.sql, tuple(params))
        queryset = self.queryset._chain()
        queryset.query.get_compiler = lambda *args, **kwargs: compiler
        return list(queryset)


def _many(value: Any) -> bool:
    return isinstance(value, (list, tuple, set, frozenset))


def _slots(values: dict[str, Any]):
    """(name, None) and a marker's value, or (name, i) and the i-th value of a list marker."""
    for name, value in values.items():
        if _many(value):
            for i, element in enumerate(value):
                yield (name, i), element
        else:
            yield (name, None), value


def _shape(values: dict[str, Any]) -> Shape:
    return tuple(
        (name, len(value) if _many(value) else None) for name, value in sorted(values.items())
    )


class Compiled:
    """A queryset ``build(*variant, **markers)`` compiled once per connection, variant and
    list length, and run with each call's marker values (see the module's docstring).
    ``markers`` names the field whose type each marker has (or a function that returns it, for
    a model not loaded when this is built); a marker given as a list (an ``IN`` condition) is
    compiled once for each length it comes with."""

    def __init__(
        self,
        build: Callable[..., models.QuerySet],
        *,
        using: str = DEFAULT_DB_ALIAS,
        **markers: models.Field | Callable[[], models.Field],
    ) -> None:
        self._build = build
        self._using = using
        self._markers = markers
        self._resolved: dict[str, models.Field] | None = None
        self._statements: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @property
    def _fields(self) -> dict[str, models.Field]:
        if self._resolved is None:
            self._resolved = {
                name: value_field(field if isinstance(field, models.Field) else field())
                for name, field in self._markers.items()
            }
        return self._resolved

    def __call__(self, *variant: Hashable, **values: Any) -> list:
        values = self._checked(values)
        if any(_many(v) and not v for v in values.values()):
            # An empty IN list: the ORM knows what it means (often no statement at all).
            return list(self._build(*variant, **values).using(self._using))
        return self._statement(variant, values).run(values)

    def bound(self, *variant: Hashable, **values: Any) -> "Bound":
        """This call's queryset, not run: for a statement that embeds it (a compare-and-set's
        ``NOT EXISTS``), as compiled SQL with its parameters, or as the queryset itself."""
        values = self._checked(values)
        if any(_many(v) and not v for v in values.values()):
            raise ValueError("Compiled.bound: an empty list marker has no compiled statement")
        return Bound(self, variant, values)

    def _checked(self, values: dict[str, Any]) -> dict[str, Any]:
        if set(values) != set(self._markers):
            raise TypeError(f"Compiled: give exactly {sorted(self._markers)}, not {sorted(values)}")
        return {name: list(v) if _many(v) else v for name, v in values.items()}

    def _statement(self, variant: tuple, values: dict[str, Any]) -> _Statement:
        connection = connections[self._using]
        statements = self._statements.setdefault(connection, {})
        key = (variant, _shape(values))
        statement = statements.get(key)
        if statement is None:
            samples = {
                name: [_sample(self._fields[name]) for _ in v]
                if _many(v)
                else _sample(self._fields[name])
                for name, v in values.items()
            }
            queryset = self._build(*variant, **samples).using(self._using)
            statement = statements[key] = _Statement(queryset, samples, self._fields)
        return statement


class Bound:
    """A ``Compiled`` queryset with one call's values (``Compiled.bound``)."""

    def __init__(self, compiled: Compiled, variant: tuple, values: dict[str, Any]) -> None:
        self._compiled, self._variant, self._values = compiled, variant, values

    def sql(self) -> tuple[str, list]:
        """The compiled SQL and this call's parameters (compiled once per connection)."""
        statement = self._compiled._statement(self._variant, self._values)
        return statement.sql, statement.params_for(self._values)

    def queryset(self) -> models.QuerySet:
        """The queryset itself, built by the ORM with this call's values."""
        return self._compiled._build(*self._variant, **self._values).using(self._compiled._using)

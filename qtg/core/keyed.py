"""Hand-written reads keyed by a model's column, for the few statements every state change
sends, where building the query through the ORM costs more than running it."""

from collections.abc import Iterable
from typing import Any

from django.db import connection, models


def value_field(field: models.Field) -> models.Field:
    """The field whose values ``field``'s column holds: a foreign key's target field (a
    movement's UUID), else ``field`` itself."""
    return field.target_field if field.is_relation else field


class KeyColumn:
    """A field of ``model`` used as the key of a hand-written statement: its quoted column, the
    ``IN`` condition on a set of keys with their parameters, and a value read back as the
    attribute the rows carry (a foreign key's column holds its target's values: a movement's
    UUID, stored as text on SQLite)."""

    def __init__(self, model: type[models.Model], name: str) -> None:
        field = model._meta.get_field(name)
        self.column = connection.ops.quote_name(field.column)
        self._values = value_field(field)

    def among(self, keys: Iterable[Any]) -> tuple[str, list[Any]]:
        """``column IN (...)`` for ``keys`` (not empty), and its parameters."""
        keys = list(keys)
        marks = ", ".join(["%s"] * len(keys))
        params = [self._values.get_db_prep_value(key, connection) for key in keys]
        return f"{self.column} IN ({marks})", params

    def read(self, value: Any) -> Any:
        return self._values.to_python(value)

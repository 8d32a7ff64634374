"""Hand-written reads keyed by a model's column, for the few statements every state change
sends, where building the query through the ORM costs more than running it."""

from collections.abc import Iterable
from typing import Any

from django.db import connection, models


class KeyColumn:
    """A field of ``model`` used as the key of a hand-written statement: its quoted column, the
    ``IN`` condition on a set of keys with their parameters, and a value read back as the
    attribute the rows carry (a foreign key's column holds its target's values: a movement's
    UUID, stored as text on SQLite)."""

    def __init__(self, model: type[models.Model], name: str) -> None:
        field = model._meta.get_field(name)
        self.column = connection.ops.quote_name(field.column)
        self._values = field.target_field if field.is_relation else field

    def among(self, keys: Iterable[Any]) -> tuple[str, list[Any]]:
        """``column IN (...)`` for ``keys`` (not empty), and its parameters."""
        keys = list(keys)
        marks = ", ".join(["%s"] * len(keys))
        params = [self._values.get_db_prep_value(key, connection) for key in keys]
        return f"{self.column} IN ({marks})", params

    def read(self, value: Any) -> Any:
        return self._values.to_python(value)

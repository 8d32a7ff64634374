"""Generate django-fsm-2 state machines from the transition tables in ``movements.states``.

One transition method per target state, ``to_<target>``, whose sources are every state the
table lets into that target. The methods live in the class body of a generated ABSTRACT base
model (methods attached after the class is built are not collected by django-fsm-2), each with
a unique ``__qualname__`` and its own bound target. They change only the in-memory state: the
service around them locks the row, saves and writes the audit event.
"""

from collections.abc import Mapping
from enum import StrEnum

from django.db import models
from django_fsm import FSMField, transition


def transition_method_name(target: str) -> str:
    return f"to_{str(target).lower()}"


def _make_transition(field_name: str, owner: str, target: StrEnum, sources: list[str]):
    def method(self) -> None:
        """Move to the target state; the service saves and audits."""

    method.__name__ = transition_method_name(target)
    method.__qualname__ = f"{owner}.{method.__name__}"
    return transition(field=field_name, source=sources, target=target.value)(method)


def state_machine_base(
    *,
    name: str,
    field_name: str,
    states: type[StrEnum],
    table: Mapping[StrEnum, set[StrEnum]],
    initial: StrEnum,
    module: str,
) -> type[models.Model]:
    """Build an abstract model with a protected FSM field and one method per target state."""
    attrs: dict[str, object] = {
        "__module__": module,
        "Meta": type("Meta", (), {"abstract": True}),
        field_name: FSMField(
            max_length=32,
            choices=states.choices(),
            default=initial.value,
            protected=True,
            db_index=True,
        ),
    }
    for target in states:
        sources = sorted(source.value for source, targets in table.items() if target in targets)
        if sources:
            attrs[transition_method_name(target)] = _make_transition(
                field_name, name, target, sources
            )
    return type(name, (models.Model,), attrs)

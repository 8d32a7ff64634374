"""The movements app as the apps beside it see it.

Dependencies between the apps go one way: ``qtg.core`` <- ``movements`` <- ``reservations``,
``callbacks``, ``sandbox``, ``venues``. Those apps import from movements only this module, the
ports they fill (``movements.ports``) and, for venue implementations, the executor interface
in ``movements.executors`` (tests/architecture holds every app to it). Movements never imports
them.

What movements offers them: the movement and node models (a venue's own records point at the
node attempt that made them), their terminal states, a way to add a section to the movement
page, the movement as the API shows it (``movement_payload``, what webhooks carry), who may
see which movements, a venue's way to report a contradicted conclusion, the linked audit
record, and the API's shared plumbing (``APIDefaults``, ``problem_responses``:
authentication, parsers, the problem+json error shape) for the endpoints other apps add
under ``/api/v1/``. No view is imported here: the reads are ``movements.selectors``, the
plumbing ``movements.api.defaults``.
"""

from collections.abc import Callable
from typing import Any

from movements.models import MovementRequest, MovementRequestNode
from movements.selectors import movement_visible_to, movements_visible_to
from movements.states import (
    TERMINAL_NODE_STATES,
    TERMINAL_REQUEST_STATES,
    NodeState,
    RequestState,
)

_movement_page_inlines: list[type] = []


def movement_payload(movement: MovementRequest) -> dict[str, Any]:
    """The movement exactly as ``GET /api/v1/movements/{id}/`` shows it (read in the caller's
    transaction, so it is the state just written)."""
    return movement_payloads([movement])[movement.pk]


def movement_payloads(movements: list[MovementRequest]) -> dict[Any, dict[str, Any]]:
    """``movement_payload`` of several movements, read together (by movement id); a movement
    whose service holds its details (``movements.selectors.details_held``) is shown from them,
    as written so far, without reading it again; one whose service holds its rows
    (``movements.selectors.rows_held``) from them and what is read beside them."""
    from movements.api.serializers import MovementSerializer, shared_serializer
    from movements.selectors import (
        DETAILS_HELD,
        ROWS_HELD,
        movements_with_details,
        payload_details_dropped,
        payload_details_read,
    )

    serializer = shared_serializer(MovementSerializer)
    payloads = {
        movement.pk: dict(serializer.to_representation(movement))
        for movement in movements
        if getattr(movement, DETAILS_HELD, False)
    }
    held = {
        movement.pk: movement
        for movement in movements
        if movement.pk not in payloads and getattr(movement, ROWS_HELD, False)
    }
    if held:
        payload_details_read(list(held.values()))
        try:
            for pk, movement in held.items():
                payloads[pk] = dict(serializer.to_representation(movement))
        finally:
            payload_details_dropped(list(held.values()))
    if unread := {movement.pk for movement in movements} - set(payloads):
        read = movements_with_details().filter(pk__in=unread)
        payloads.update(
            {movement.pk: dict(serializer.to_representation(movement)) for movement in read}
        )
    return payloads


def after_writes_together(
    fn: Callable[[list[Any]], Any], item: Any, *, first: bool = False
) -> None:
    """``after_writes`` for hooks that do better together (see the writers' docstring)."""
    from movements.services.writers import after_writes_together as run_together

    run_together(fn, item, first=first)


def after_writes(hook: Callable[[], Any]) -> None:
    """Run ``hook`` once the movement rows written so far are in the database (at once, or
    at the end of the worker's write batch, in the same transaction)."""
    from movements.services.writers import after_writes as run_after

    run_after(hook)


def node_conclusion_contradicted(
    *, node_id: int, reason: str, message: str, evidence: dict[str, Any], actor: Any
) -> str:
    """A venue's fact contradicts a node already concluded: attention, and a movement still
    EXECUTING to MANUAL_INTERVENTION (``movements.services.attention``)."""
    from movements.services.attention import node_conclusion_contradicted as contradicted

    return contradicted(
        node_id=node_id, reason=reason, message=message, evidence=evidence, actor=actor
    )


def record_decision(*, subject: Any, action: str, actor: Any, detail: dict | None = None) -> Any:
    """Append a linked audit record of a decision that has no event table of its own (a
    webhook subscription changed, an exchange's answer journaled): ``movements.audit``."""
    from movements.audit import record_decision as record

    return record(subject=subject, action=action, actor=actor, detail=detail)


def add_movement_page_inline(inline: type) -> None:
    """Show ``inline`` (an admin inline of a model with a foreign key to the movement) on the
    movement page, after the nodes and the audit trail."""
    if inline not in _movement_page_inlines:
        _movement_page_inlines.append(inline)


def movement_page_inlines() -> list[type]:
    return list(_movement_page_inlines)


def __getattr__(name: str) -> Any:
    # The API plumbing is imported on first use: the apps import this module while Django
    # is still loading, before the API (and DRF's settings) may be.
    if name in ("APIDefaults", "problem_responses"):
        from movements.api import defaults

        return getattr(defaults, name)
    if name == "PagePagination":
        from movements.api import pagination

        return pagination.PagePagination
    if name == "MOVEMENT_EXAMPLE":
        # A movement as the API shows it, for the examples other apps publish.
        from movements.api import examples

        return examples.MOVEMENT_VALUE
    if name in ("ProblemSerializer", "MovementSerializer"):
        from movements.api import serializers

        return getattr(serializers, name)
    raise AttributeError(name)


__all__ = [
    "TERMINAL_NODE_STATES",
    "TERMINAL_REQUEST_STATES",
    "MovementRequest",
    "MovementRequestNode",
    "NodeState",
    "RequestState",
    "add_movement_page_inline",
    "after_writes",
    "after_writes_together",
    "movement_page_inlines",
    "movement_payload",
    "movement_payloads",
    "movement_visible_to",
    "movements_visible_to",
    "node_conclusion_contradicted",
    "record_decision",
]

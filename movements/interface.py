"""The movements app as the apps beside it see it.

Dependencies between the apps go one way: ``qtg.core`` <- ``movements`` <- ``reservations``,
``callbacks``, ``sandbox`` (and the real venues to come). Those apps import from movements
only this module and, for venue implementations, the executor interface in
``movements.executors`` (a test holds every app to it). Movements never imports them.

What movements offers them: the movement and node models (a venue's own records point at
the node attempt that made them), their terminal states, a way to add a section
to the movement page, the movement as the API shows it (``movement_payload``, what webhooks
carry), who may see which movements, and the API's shared plumbing (``APIDefaults``,
``problem_responses``: authentication, parsers, the problem+json error shape) for the
endpoints other apps add under ``/api/v1/``.

What movements needs from them, without importing them: a reservation ledger (hold when a
movement is validated, consume on COMPLETED, release by the spec's rule) and a callback
outbox (record an event in the caller's transaction). Their apps plug themselves in from
``AppConfig.ready()`` with ``provide_reservations`` / ``provide_callbacks``. Without a ledger
no movement validates (reservations fail closed); without an outbox movements refuse to run
rather than change state silently, so both apps are part of every deployment.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from movements.models import MovementRequest, MovementRequestNode
from movements.states import (
    TERMINAL_NODE_STATES,
    TERMINAL_REQUEST_STATES,
    NodeState,
    RequestState,
)


@dataclass(frozen=True)
class ReservationLedger:
    """``hold(request=, actor=)`` raises ``qtg.core.errors.ReservationRefused`` when a limit
    refuses; ``consume`` / ``release(request=, actor=, reason=)`` settle the reservation in
    the caller's transaction."""

    hold: Callable[..., Any]
    consume: Callable[..., Any]
    release: Callable[..., Any]


@dataclass(frozen=True)
class CallbackOutbox:
    """``enqueue(request=, event_type=, data=)`` records the event for delivery after the
    caller's transaction commits (the caller holds the movement's row lock, as every state
    change does: the outbox numbers a movement's events under it); ``read_once()`` is a
    context in which the subscriptions are read once (a worker writing many transitions in
    one transaction)."""

    enqueue: Callable[..., Any]
    read_once: Callable[[], AbstractContextManager[Any]]


_provided: dict[str, Any] = {}
_movement_page_inlines: list[type] = []
_embedded_services: list[Callable[[dict[str, str]], list[Any]]] = []


def provide_reservations(ledger: ReservationLedger) -> None:
    _provided["reservations"] = ledger


def provide_callbacks(outbox: CallbackOutbox) -> None:
    _provided["callbacks"] = outbox


def reservations() -> ReservationLedger:
    return _require("reservations", "reservations")


def callbacks() -> CallbackOutbox:
    return _require("callbacks", "callbacks")


def _require(name: str, app: str) -> Any:
    try:
        return _provided[name]
    except KeyError:
        raise ImproperlyConfigured(
            f"movements needs the {name} of the {app!r} app: add it to INSTALLED_APPS"
        ) from None


def movement_payload(movement: MovementRequest) -> dict[str, Any]:
    """The movement exactly as ``GET /api/v1/movements/{id}/`` shows it (read in the caller's
    transaction, so it is the state just written)."""
    return movement_payloads([movement])[movement.pk]


def movement_payloads(movements: list[MovementRequest]) -> dict[Any, dict[str, Any]]:
    """``movement_payload`` of several movements, read together (by movement id)."""
    from movements.api.selectors import movements_with_details
    from movements.api.serializers import MovementSerializer, shared_serializer

    serializer = shared_serializer(MovementSerializer)
    read = movements_with_details().filter(pk__in={movement.pk for movement in movements})
    return {movement.pk: dict(serializer.to_representation(movement)) for movement in read}


def after_writes_together(fn: Callable[[list[Any]], Any], item: Any) -> None:
    """``after_writes`` for hooks that do better together (see the writers' docstring)."""
    from movements.services.writers import after_writes_together as run_together

    run_together(fn, item)


def after_writes(hook: Callable[[], Any]) -> None:
    """Run ``hook`` once the movement rows written so far are in the database (at once, or
    at the end of the worker's write batch, in the same transaction)."""
    from movements.services.writers import after_writes as run_after

    run_after(hook)


def movements_visible_to(user: Any) -> Any:
    """The movements an API client may see (a queryset): all of them for holders of the
    view permission, otherwise those it created."""
    from movements.api.selectors import movements_visible_to as visible

    return visible(user)


def movement_visible_to(user: Any, movement: MovementRequest) -> bool:
    """Whether ``user`` may see ``movement`` (the rule of ``movements_visible_to``)."""
    from movements.api.selectors import VIEW_ALL_PERMISSIONS

    if user is None or not user.is_active:
        return False
    if movement.created_by_id == user.pk:
        return True
    return any(user.has_perm(perm) for perm in VIEW_ALL_PERMISSIONS)


_API_EXPORTS = ("APIDefaults", "problem_responses", "ProblemSerializer", "MovementSerializer")


def __getattr__(name: str) -> Any:
    # The API plumbing is imported on first use: the apps import this module while Django
    # is still loading, before the API (and DRF's settings) may be.
    if name in _API_EXPORTS:
        from movements.api import views

        return getattr(views, name)
    raise AttributeError(name)


def add_movement_page_inline(inline: type) -> None:
    """Show ``inline`` (an admin inline of a model with a foreign key to the movement) on the
    movement page, after the nodes and the audit trail."""
    if inline not in _movement_page_inlines:
        _movement_page_inlines.append(inline)


def movement_page_inlines() -> list[type]:
    return list(_movement_page_inlines)


def provide_embedded_services(start: Callable[[dict[str, str]], list[Any]]) -> None:
    """``start(env)`` runs before ``make run`` starts web, worker and beat: it may start child
    processes (a venue's local stand-in), returned to be stopped at the end, and add to
    ``env`` what those three processes need to reach them."""
    if start not in _embedded_services:
        _embedded_services.append(start)


def embedded_services() -> list[Callable[[dict[str, str]], list[Any]]]:
    return list(_embedded_services)


__all__ = [
    "TERMINAL_NODE_STATES",
    "TERMINAL_REQUEST_STATES",
    "CallbackOutbox",
    "MovementRequest",
    "MovementRequestNode",
    "NodeState",
    "RequestState",
    "ReservationLedger",
    "add_movement_page_inline",
    "after_writes",
    "after_writes_together",
    "callbacks",
    "embedded_services",
    "movement_page_inlines",
    "movement_payload",
    "movement_payloads",
    "movement_visible_to",
    "movements_visible_to",
    "provide_callbacks",
    "provide_embedded_services",
    "provide_reservations",
    "reservations",
]

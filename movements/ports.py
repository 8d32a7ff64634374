"""What movements needs from the apps beside it, without importing them.

A reservation ledger (hold when a movement is validated, consume on COMPLETED, release by the
spec's rule), a callback outbox (record an event in the caller's transaction) and, optionally,
a notifier (tell the people who can act on an event): their apps plug themselves in from
``AppConfig.ready()`` with ``provide_reservations`` / ``provide_callbacks`` /
``provide_notifications``. For ``make run`` under ``QTG_VENUES=local``, the local services started
first: ``python -m standins.local`` plugs the stand-ins in with ``provide_embedded_services``
before it runs ``run_embedded`` (the product never imports them). Without a ledger no movement
validates (reservations fail closed); without an outbox movements refuse to run rather than
change state silently, so both apps are part of every deployment.

This module imports nothing of movements: the services call out through it, and what
movements offers the other apps is ``movements.public``.
"""

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured


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
    one transaction); ``together()`` a context whose events, each showing the movement as it
    was when enqueued, are written together when it ends (an approval's two events).
    ``last_sequence(ref)`` is an expression for the number of the newest event of the movement
    ``ref`` (an ``OuterRef``) names, for a read made under the movement's lock, which tells
    them to ``sequences_known({movement id: number})`` inside ``read_once()``: its next events
    are numbered without reading it again."""

    enqueue: Callable[..., Any]
    read_once: Callable[[], AbstractContextManager[Any]]
    together: Callable[[], AbstractContextManager[Any]]
    last_sequence: Callable[[Any], Any]
    sequences_known: Callable[[Mapping[Any, int | None]], None]


@dataclass(frozen=True)
class Notifier:
    """``notify(kind=, request=, actor=, proposal=None, detail=None)`` records, in the caller's
    transaction, the notifications an event causes for the people who can act on it (sent by
    a worker after it commits). ``kind``: ``approval_waiting``, ``manual_intervention``,
    ``attention``, ``override_proposal``. Optional: without the notifications app nobody is
    notified and nothing else changes (the console's queue shows the same work)."""

    notify: Callable[..., Any]


_provided: dict[str, Any] = {}
_embedded_services: list[Callable[[dict[str, str]], list[Any]]] = []


def provide_reservations(ledger: ReservationLedger) -> None:
    _provided["reservations"] = ledger


def provide_callbacks(outbox: CallbackOutbox) -> None:
    _provided["callbacks"] = outbox


def provide_notifications(notifier: Notifier) -> None:
    _provided["notifications"] = notifier


def notify(**event: Any) -> None:
    """Tell the notifier of an event (``Notifier.notify``'s arguments), if one is provided."""
    notifier = _provided.get("notifications")
    if notifier is not None:
        notifier.notify(**event)


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


def provide_embedded_services(start: Callable[[dict[str, str]], list[Any]]) -> None:
    """``start(env)`` runs before ``make run`` starts web, worker and beat: it may start child
    processes (a venue's local stand-in), returned to be stopped at the end, and add to
    ``env`` what those three processes need to reach them."""
    if start not in _embedded_services:
        _embedded_services.append(start)


def embedded_services() -> list[Callable[[dict[str, str]], list[Any]]]:
    return list(_embedded_services)

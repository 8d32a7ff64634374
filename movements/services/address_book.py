"""The address book: vetted destinations per asset and network.

An entry is proposed by one person and approved by another (four-eyes); it is usable from
``usable_from`` = approval + ``QTG_ADDRESS_COOLDOWN``. While ``QTG_ADDRESS_BOOK_ENFORCED`` is
on, a movement's destination must be an active entry for its asset and network: checked at
create (RECEIVED -> FAILED otherwise) and again at dispatch of each side-effect node
(READY -> FAILED, "destination not allowlisted"; a destination still in its cool-down waits).

The network of a movement is its ``network`` param, else its ``destination_chain`` param
(CCTP), else blank.
"""

from datetime import datetime
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from movements.models import AddressBookEntry, EntryStatus, MovementRequest
from movements.policies import (
    PROPOSE_ADDRESS_PERMISSION,
    address_decide_refusal,
    address_remove_refusal,
)
from qtg.core.actors import Actor
from qtg.core.errors import ActionRefused, InvalidInput
from qtg.core.policies import enforce, lacks_permission

NOT_ALLOWLISTED = "destination not allowlisted"


class Standing(StrEnum):
    """What the book says about a destination now."""

    ALLOWED = "allowed"
    COOLING_DOWN = "cooling_down"
    NOT_ALLOWLISTED = "not_allowlisted"


def network_of(*, params: dict[str, Any] | None) -> str:
    params = params or {}
    return str(params.get("network") or params.get("destination_chain") or "")


def destination_standing(
    *, asset: str, network: str, address: str, now: datetime | None = None
) -> tuple[Standing, AddressBookEntry | None]:
    """Whether ``address`` may receive ``asset`` on ``network`` now."""
    entry = AddressBookEntry.objects.filter(
        asset=asset.upper(), network=network, address=address, status=EntryStatus.ACTIVE
    ).first()
    if entry is None:
        return Standing.NOT_ALLOWLISTED, None
    if entry.usable_from and entry.usable_from > (now or timezone.now()):
        return Standing.COOLING_DOWN, entry
    return Standing.ALLOWED, entry


def standing_of(request: MovementRequest, now: datetime | None = None):
    """``destination_standing`` of a movement; ALLOWED when the book is not enforced."""
    if not settings.QTG_ADDRESS_BOOK_ENFORCED:
        return Standing.ALLOWED, None
    return destination_standing(
        asset=request.asset,
        network=network_of(params=request.params),
        address=request.destination,
        now=now,
    )


def standing_message(request: MovementRequest, standing: Standing, entry: Any) -> str:
    network = network_of(params=request.params) or "no network"
    if standing == Standing.COOLING_DOWN:
        return (
            f"destination {request.destination} ({entry.label}) is in its cool-down until "
            f"{entry.usable_from.isoformat()}"
        )
    return (
        f"{NOT_ALLOWLISTED}: {request.destination} is not in the address book for "
        f"{request.asset} on {network}"
    )


@transaction.atomic
def address_propose(
    *, actor: Actor, asset: str, address: str, label: str, network: str = ""
) -> AddressBookEntry:
    """Propose a destination for the book; it needs another person's approval."""
    enforce(lacks_permission(actor, PROPOSE_ADDRESS_PERMISSION))
    errors = {
        name: ["required"]
        for name, value in (("asset", asset), ("address", address), ("label", label))
        if not (value or "").strip()
    }
    if errors:
        raise InvalidInput("the address book entry is invalid", details=errors)
    try:
        with transaction.atomic():
            return AddressBookEntry.objects.create(
                asset=asset.strip().upper(),
                network=(network or "").strip(),
                address=address.strip(),
                label=label.strip(),
                proposed_by=actor.user,
                proposed_at=timezone.now(),
            )
    except IntegrityError:
        raise ActionRefused(
            f"{address} is already in the book (or proposed) for {asset} on {network or '-'}"
        ) from None


def _lock(entry: AddressBookEntry | Any) -> AddressBookEntry:
    pk = entry.pk if isinstance(entry, AddressBookEntry) else entry
    return AddressBookEntry.objects.select_for_update().get(pk=pk)


@transaction.atomic
def address_approve(*, entry: AddressBookEntry | Any, actor: Actor) -> AddressBookEntry:
    """A second person approves a proposed entry; usable after the cool-down."""
    entry = _lock(entry)
    enforce(address_decide_refusal(actor=actor, entry=entry))
    now = timezone.now()
    entry.status = EntryStatus.ACTIVE
    entry.decided_by, entry.decided_at = actor.user, now
    entry.usable_from = now + settings.QTG_ADDRESS_COOLDOWN
    entry.save(update_fields=["status", "decided_by", "decided_at", "usable_from"])
    return entry


@transaction.atomic
def address_reject(*, entry: AddressBookEntry | Any, actor: Actor) -> AddressBookEntry:
    """A second person turns a proposed entry down."""
    entry = _lock(entry)
    enforce(address_decide_refusal(actor=actor, entry=entry))
    entry.status = EntryStatus.REJECTED
    entry.decided_by, entry.decided_at = actor.user, timezone.now()
    entry.save(update_fields=["status", "decided_by", "decided_at"])
    return entry


@transaction.atomic
def address_remove(*, entry: AddressBookEntry | Any, actor: Actor) -> AddressBookEntry:
    """Take an active entry out of the book: movements to it fail at their next dispatch."""
    entry = _lock(entry)
    enforce(address_remove_refusal(actor=actor, entry=entry))
    entry.status = EntryStatus.REMOVED
    entry.removed_at = timezone.now()
    entry.save(update_fields=["status", "removed_at"])
    return entry

"""The address book: vetted destinations per asset and network.

An entry is proposed by one person and approved by another (four-eyes); it is usable from
``usable_from`` = approval + ``QTG_ADDRESS_COOLDOWN``. While ``QTG_ADDRESS_BOOK_ENFORCED`` is
on, a movement's destination must be an active entry for its asset and network: checked at
create (RECEIVED -> FAILED otherwise) and again at dispatch of each side-effect node
(READY -> FAILED, "destination not allowlisted"; a destination still in its cool-down waits).

The network a movement's destination is on is decided by one function per route template
(``DESTINATION_NETWORK``): the chain or network parameter that template sends to the destination
on, whatever the template calls it (``chain``, ``network``, ``destination_chain``). A template
the table does not name has no network the book can vouch for: its movements are refused while
the book is enforced (a deployment with its own templates adds them to the table).

Addresses are compared per family (``same_destination``): an EVM address case-insensitively
(mixed case must be a valid EIP-55 checksum to be proposed), a base58 (Solana) address exactly,
a venue name in its canonical spelling.
"""

from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from movements.audit import record_decision
from movements.models import AddressBookEntry, EntryStatus, MovementRequest
from movements.policies import (
    PROPOSE_ADDRESS_PERMISSION,
    address_decide_refusal,
    address_remove_refusal,
)
from qtg.core.actors import Actor
from qtg.core.chains import address_problem as family_address_problem
from qtg.core.chains import normalise_address
from qtg.core.errors import ActionRefused, InvalidInput
from qtg.core.policies import enforce, lacks_permission
from qtg.core.venues import canonical_venue

NOT_ALLOWLISTED = "destination not allowlisted"


class Standing(StrEnum):
    """What the book says about a destination now."""

    ALLOWED = "allowed"
    COOLING_DOWN = "cooling_down"
    NOT_ALLOWLISTED = "not_allowlisted"


# --- which network a template sends to the destination on ------------------------------------


def _withdrawal_network(params: dict[str, Any]) -> str:
    """Exchange withdrawals (cex_to_cex, cex_to_cex_gated, split_withdraw, split_join): the
    ``network`` the exchange sends on."""
    return str(params.get("network") or "")


def _transfer_chain(params: dict[str, Any]) -> str:
    """A transfer on one chain (evm_transfer, sol_transfer): its ``chain``."""
    return str(params.get("chain") or "")


def _mint_chain(params: dict[str, Any]) -> str:
    """CCTP burns on ``source_chain`` and mints to the destination on ``destination_chain``."""
    return str(params.get("destination_chain") or "")


DESTINATION_NETWORK: dict[str, Callable[[dict[str, Any]], str]] = {
    "cex_to_cex": _withdrawal_network,
    "cex_to_cex_gated": _withdrawal_network,
    "split_withdraw": _withdrawal_network,
    "split_join": _withdrawal_network,
    "evm_transfer": _transfer_chain,
    "sol_transfer": _transfer_chain,
    "cctp": _mint_chain,
    "cctp_v2": _mint_chain,
    "cctp_v2_fast": _mint_chain,
}


def network_of(*, template_key: str, params: dict[str, Any] | None) -> str | None:
    """The network the template ``template_key`` sends to the destination on, from the
    movement's bound params; None for a template the table does not know."""
    decide = DESTINATION_NETWORK.get(template_key)
    return None if decide is None else decide(params or {})


# --- addresses compared per family ------------------------------------------------------------


def address_problem(address: str) -> str | None:
    """Why ``address`` cannot be proposed for the book (a mixed-case EVM address whose
    EIP-55 checksum is wrong is a typo, not a spelling), or None."""
    return family_address_problem(address.strip())


def destination_key(address: str) -> str:
    """The spelling two addresses of one destination share: an EVM address in lower case, a
    base58 address exactly as written, a venue name canonical."""
    value = (address or "").strip()
    normalised = normalise_address(value)
    return normalised if normalised is not None else canonical_venue(value)


def same_destination(a: str, b: str) -> bool:
    return destination_key(a) == destination_key(b)


def destination_standing(
    *, asset: str, network: str, address: str, now: datetime | None = None
) -> tuple[Standing, AddressBookEntry | None]:
    """Whether ``address`` may receive ``asset`` on ``network`` now."""
    # The database narrows by case-insensitive match; the family's own rule decides (base58
    # is case-sensitive: 6hmMy... and 6HmMy... are different keys).
    candidates = AddressBookEntry.objects.filter(
        asset=asset.upper(), network=network, address__iexact=address, status=EntryStatus.ACTIVE
    )
    entry = next((e for e in candidates if same_destination(e.address, address)), None)
    if entry is None:
        return Standing.NOT_ALLOWLISTED, None
    if entry.usable_from and entry.usable_from > (now or timezone.now()):
        return Standing.COOLING_DOWN, entry
    return Standing.ALLOWED, entry


def standing_of(request: MovementRequest, now: datetime | None = None):
    """``destination_standing`` of a movement; ALLOWED when the book is not enforced."""
    if not settings.QTG_ADDRESS_BOOK_ENFORCED:
        return Standing.ALLOWED, None
    network = network_of(template_key=request.template_key, params=request.params)
    if network is None:
        return Standing.NOT_ALLOWLISTED, None
    return destination_standing(
        asset=request.asset,
        network=network,
        address=request.destination,
        now=now,
    )


def standing_message(request: MovementRequest, standing: Standing, entry: Any) -> str:
    network = network_of(template_key=request.template_key, params=request.params)
    if network is None:
        return (
            f"{NOT_ALLOWLISTED}: template {request.template_key} does not say which network "
            f"its destination is on (movements.services.address_book.DESTINATION_NETWORK)"
        )
    network = network or "no network"
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
    if not errors and (problem := address_problem(address)):
        errors["address"] = [problem]
    if errors:
        raise InvalidInput("the address book entry is invalid", details=errors)
    try:
        with transaction.atomic():
            entry = AddressBookEntry.objects.create(
                asset=asset.strip().upper(),
                network=(network or "").strip(),
                address=address.strip(),
                label=label.strip(),
                proposed_by=actor.user,
                proposed_at=timezone.now(),
            )
            _record(entry, "proposed", actor)
            return entry
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
    _record(entry, "approved", actor)
    return entry


@transaction.atomic
def address_reject(*, entry: AddressBookEntry | Any, actor: Actor) -> AddressBookEntry:
    """A second person turns a proposed entry down."""
    entry = _lock(entry)
    enforce(address_decide_refusal(actor=actor, entry=entry))
    entry.status = EntryStatus.REJECTED
    entry.decided_by, entry.decided_at = actor.user, timezone.now()
    entry.save(update_fields=["status", "decided_by", "decided_at"])
    _record(entry, "rejected", actor)
    return entry


@transaction.atomic
def address_remove(*, entry: AddressBookEntry | Any, actor: Actor) -> AddressBookEntry:
    """Take an active entry out of the book: movements to it fail at their next dispatch."""
    entry = _lock(entry)
    enforce(address_remove_refusal(actor=actor, entry=entry))
    entry.status = EntryStatus.REMOVED
    entry.removed_at = timezone.now()
    entry.save(update_fields=["status", "removed_at"])
    _record(entry, "removed", actor)
    return entry


def _record(entry: AddressBookEntry, action: str, actor: Actor) -> None:
    """The decision in the evidence chain: who, and the entry as it is now."""
    record_decision(
        subject=entry,
        action=action,
        actor=actor,
        detail={
            "asset": entry.asset,
            "network": entry.network,
            "address": entry.address,
            "label": entry.label,
            "status": entry.status,
            "usable_from": entry.usable_from,
            "removed_at": entry.removed_at,
        },
    )

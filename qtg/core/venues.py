"""Venue names: one canonical spelling, and the list of venues a movement may name.

A venue reached by several spellings (``SANDBOX-EXCHANGE-A``, ``sandbox-exchange-a.``) would
escape a hardcap scoped to one of them, so movements and hardcaps store the canonical form:
trimmed, lower case, without trailing dots. Chain addresses are venues too (a transfer's
destination): each is compared in its chain family's spelling (``qtg.core.chains``: the
families register how their addresses are spelled and compared; the kernel knows none).
"""

from django.conf import settings

from qtg.core.chains import is_chain_address, normalise_address

__all__ = ["canonical_venue", "is_chain_address", "is_known_venue", "provide_venues"]

_provided: set[str] = set()
_details: dict[str, dict] = {}


def canonical_venue(name: str) -> str:
    """The one spelling of a venue name that movements and hardcap scopes compare."""
    value = (name or "").strip()
    address = normalise_address(value)
    if address is not None:
        return address
    return value.lower().rstrip(".")


def provide_venues(names: list[str], *, details: dict[str, dict] | None = None) -> None:
    """Venues known from an app's reviewed configuration (the real venues' accounts), beside
    ``QTG_KNOWN_VENUES``, with what the API's venue list says of each (``venue_details``)."""
    _provided.update(canonical_venue(name) for name in names if name.strip())
    for name, detail in (details or {}).items():
        _details[canonical_venue(name)] = dict(detail)


LISTED = {"kind": "listed", "chain": None, "chain_kind": None, "exchange": None, "assets": None}


def venue_details() -> list[dict]:
    """Every known venue with its kind (``chain_account``, ``exchange_account``, or ``listed``
    in ``QTG_KNOWN_VENUES``), chain or exchange and assets (null: not restricted here)."""
    return [{"name": name, **_details.get(name, LISTED)} for name in venue_choices()]


def known_venues() -> frozenset[str]:
    """The venues movements may name (``QTG_KNOWN_VENUES`` and the configured accounts),
    canonical."""
    listed = (canonical_venue(name) for name in settings.QTG_KNOWN_VENUES if name.strip())
    return frozenset(listed) | frozenset(_provided)


def venue_choices() -> list[str]:
    """The known venues, sorted (the API's choices and its schema's VenueEnum)."""
    return sorted(known_venues())


def is_known_venue(name: str) -> bool:
    """A listed or configured venue, or a well-formed chain address (where money may be sent
    is the address book's question, not this one's)."""
    return canonical_venue(name) in known_venues() or is_chain_address(name)

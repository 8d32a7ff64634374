"""Venue names: one canonical spelling, and the list of venues a movement may name.

A venue reached by several spellings (``SANDBOX-EXCHANGE-A``, ``sandbox-exchange-a.``) would
escape a hardcap scoped to one of them, so movements and hardcaps store the canonical form:
trimmed, lower case, without trailing dots.
"""

from django.conf import settings


def canonical_venue(name: str) -> str:
    """The one spelling of a venue name that movements and hardcap scopes compare."""
    return (name or "").strip().lower().rstrip(".")


def known_venues() -> frozenset[str]:
    """The venues movements may name (``QTG_KNOWN_VENUES``), canonical."""
    return frozenset(canonical_venue(name) for name in settings.QTG_KNOWN_VENUES if name.strip())


def venue_choices() -> list[str]:
    """The known venues, sorted (the API's choices and its schema's VenueEnum)."""
    return sorted(known_venues())


def is_known_venue(name: str) -> bool:
    return canonical_venue(name) in known_venues()

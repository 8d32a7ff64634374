"""Venue names: one canonical spelling, and the list of venues a movement may name.

A venue reached by several spellings (``SANDBOX-EXCHANGE-A``, ``sandbox-exchange-a.``) would
escape a hardcap scoped to one of them, so movements and hardcaps store the canonical form:
trimmed, lower case, without trailing dots. Chain addresses are venues too (a transfer's
destination): an EVM address is compared in lower case (its checksum is only a spelling), a
Solana address keeps its case (base58 is case-sensitive).
"""

import re

from django.conf import settings

EVM_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
# base58 (no 0, O, I, l) of a 32-byte public key: 32 to 44 characters.
BASE58_ADDRESS = re.compile(r"^[1-9A-HJ-NP-Za-km-z]{32,44}$")

_provided: set[str] = set()


def is_chain_address(name: str) -> bool:
    """Whether ``name`` is spelled as an EVM (0x + 40 hex) or Solana (base58) address."""
    value = (name or "").strip()
    return bool(EVM_ADDRESS.match(value) or BASE58_ADDRESS.match(value))


def canonical_venue(name: str) -> str:
    """The one spelling of a venue name that movements and hardcap scopes compare."""
    value = (name or "").strip()
    if BASE58_ADDRESS.match(value):
        return value
    return value.lower().rstrip(".")


def provide_venues(names: list[str]) -> None:
    """Venues known from an app's reviewed configuration (the real venues' accounts), beside
    ``QTG_KNOWN_VENUES``."""
    _provided.update(canonical_venue(name) for name in names if name.strip())


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

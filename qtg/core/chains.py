"""Chain families as a registry: the kernel knows that chain addresses exist, not how any
family spells them.

A family (``venues.evm.family``, ``venues.solana.family``; registered when the venues app
is ready) says how its addresses are recognised, compared and shown, which chain-transaction
fields it uses, and its finality vocabulary (the words its ``chains.yaml`` entries may use).
A new family (Bitcoin, a Cosmos chain) registers one more ``ChainFamily``; nothing in the
kernel changes.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field


def _none(_: str) -> str | None:
    return None


@dataclass(frozen=True)
class ChainFamily:
    name: str  # the ``kind`` of its chains in ``chains.yaml``
    address: re.Pattern[str]  # how one of its addresses is spelled (anchored)
    normalise: Callable[[str], str]  # the one spelling two equal addresses share
    format: Callable[[str], str] = str  # how it is shown (e.g. an EIP-55 checksum)
    problem: Callable[[str], str | None] = _none  # why a well-spelled address is refused
    tx_fields: tuple[str, ...] = ()  # ChainTransaction fields the family fills
    finality: tuple[str, ...] = ()  # its finality vocabulary
    detail: dict[str, str] = field(default_factory=dict)  # what the words mean

    def matches(self, value: str) -> bool:
        return bool(self.address.match(value))


_families: dict[str, ChainFamily] = {}


def register_family(family: ChainFamily) -> None:
    """Register (or replace, on a reload) a family by its name."""
    _families[family.name] = family


def families() -> dict[str, ChainFamily]:
    return dict(_families)


def family(name: str) -> ChainFamily:
    try:
        return _families[name]
    except KeyError:
        raise LookupError(f"no chain family {name!r} is registered") from None


def family_of_address(value: str) -> ChainFamily | None:
    """The family whose addresses are spelled like ``value`` (first registered wins)."""
    value = (value or "").strip()
    return next((found for found in _families.values() if found.matches(value)), None)


def is_chain_address(value: str) -> bool:
    return family_of_address(value) is not None


def normalise_address(value: str) -> str | None:
    """The family's comparison spelling of a chain address; None for anything else."""
    found = family_of_address(value)
    return found.normalise(value.strip()) if found is not None else None


def format_address(value: str) -> str:
    found = family_of_address(value)
    return found.format(value.strip()) if found is not None else value


def address_problem(value: str) -> str | None:
    found = family_of_address(value)
    return found.problem(value.strip()) if found is not None else None


def address_pattern() -> str:
    """Every family's address spelling, one alternation (the API schema's pattern)."""
    return "|".join(found.address.pattern for found in _families.values())

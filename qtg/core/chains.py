"""Chain families as a registry: the kernel knows that chain addresses exist, not how any
family spells them.

A family (``venues.evm.family``, ``venues.solana.family``; registered when the venues app
is ready) says how its addresses are recognised, compared and shown; how its ``chains.yaml``
entries are parsed; the fields of its own a chain transaction carries (``tx_detail``: kept in
the shared table's ``family_detail``, validated here against the family's schema); its
finality vocabulary and how a chain's policy reads; how a fee in its smallest native unit is
shown; how a transaction's call is decoded for a person; and its explorer link. A new family
(Bitcoin, a Cosmos chain) registers one more ``ChainFamily``; nothing in the kernel changes.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import import_module
from typing import Any

from qtg.core.money import format_amount


def _none(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class TxDetailField:
    """One field of a family's chain-transaction detail: a whole number (``uint``: any size,
    stored as its decimal string so every database and JSON reader keeps it exact) or ``text``;
    ``show`` says how a person reads it (e.g. wei as gwei)."""

    name: str
    label: str
    kind: str = "uint"  # "uint" | "text"
    show: Callable[[Any], str] = str


@dataclass(frozen=True)
class DecodedCall:
    """What a transaction asks the chain to do, for a person: a one-line summary and the
    decoded arguments (label, value), amounts in their asset's units."""

    summary: str
    arguments: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class FinalityPolicy:
    """What a chain's reviewed finality policy requires: ``required`` blocks or slots deep
    (None: a tag or commitment level, not a count) and its name as a person reads it."""

    required: int | None
    name: str


def coin_amount(units: int, decimals: int, symbol: str) -> str:
    """``units`` of a coin with ``decimals`` as a person reads it: ``0.000441 ETH``."""
    return f"{format_amount(Decimal(units).scaleb(-decimals), grouping=True)} {symbol}".strip()


@dataclass(frozen=True)
class ChainFamily:
    name: str  # the ``kind`` of its chains in ``chains.yaml``
    address: re.Pattern[str]  # how one of its addresses is spelled (anchored)
    normalise: Callable[[str], str]  # the one spelling two equal addresses share
    format: Callable[[str], str] = str  # how it is shown (e.g. an EIP-55 checksum)
    problem: Callable[[str], str | None] = _none  # why a well-spelled address is refused
    tx_fields: tuple[str, ...] = ()  # ChainTransaction shared columns the family fills
    tx_detail: tuple[TxDetailField, ...] = ()  # its own fields (``family_detail``)
    finality: tuple[str, ...] = ()  # its finality vocabulary
    detail: dict[str, str] = field(default_factory=dict)  # what the words mean
    # "module.function" of (name, its chains.yaml entry) -> the parsed chain (the adapter's
    # dataclass), imported when a chain is first parsed (web3, solders load only then)
    parse_chain: str = ""
    finality_policy: Callable[[Any], FinalityPolicy] = _none  # a parsed chain's policy
    native: tuple[str, int] = ("", 0)  # the native coin's symbol and decimals by default
    # (fee in the smallest native unit, the chain's native symbol or "") -> how it reads
    format_fee: Callable[[int, str], str] = lambda units, symbol: f"{units}"
    # (the transaction as signed, the parsed chain or None) -> the decoded call or None
    decode_call: Callable[[Mapping[str, Any], Any], DecodedCall | None] = _none
    explorer_tx_url: str = ""  # default link template, ``{tx}``; chains.yaml may set its own

    def matches(self, value: str) -> bool:
        return bool(self.address.match(value))

    def parse(self, name: str, entry: dict[str, Any]) -> Any:
        """Chain ``name``'s ``chains.yaml`` entry parsed by the family's parser."""
        if not self.parse_chain:
            raise LookupError(f"the {self.name} family parses no chain")
        module, _, function = self.parse_chain.rpartition(".")
        return getattr(import_module(module), function)(name, entry)

    def tx_detail_json(self, values: Mapping[str, Any]) -> dict[str, str]:
        """``values`` checked against the family's schema, as stored: unknown names and
        wrong types are refused (ValueError), absent (None) fields left out."""
        schema = {f.name: f for f in self.tx_detail}
        unknown = sorted(set(values) - set(schema))
        if unknown:
            raise ValueError(f"{self.name} transactions have no field {', '.join(unknown)}")
        stored: dict[str, str] = {}
        for name, value in values.items():
            if value is None:
                continue
            if schema[name].kind == "uint":
                if isinstance(value, bool) or int(value) != value or int(value) < 0:
                    raise ValueError(f"{self.name} {name} must be a whole number >= 0")
                stored[name] = str(int(value))
            else:
                stored[name] = str(value)
        return stored

    def tx_detail_values(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """The stored detail read back typed (``uint`` as int); every schema field present
        (None when absent)."""
        values: dict[str, Any] = {}
        for f in self.tx_detail:
            raw = stored.get(f.name)
            values[f.name] = None if raw in (None, "") else int(raw) if f.kind == "uint" else raw
        return values

    def explorer_link(self, tx_hash: str, template: str = "") -> str:
        """The transaction on an explorer: the chain's reviewed template, else the family's
        (``{tx}`` is the hash or signature); "" when neither is set or nothing was signed."""
        template = template or self.explorer_tx_url
        return template.replace("{tx}", tx_hash) if template and tx_hash else ""


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

"""The sandbox's per-chain finality (its simulated chains only; real chains say theirs in
``venues/chains.yaml``), loaded from the reviewed ``finality.yaml`` next to this module."""

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

FINALITY_FILE = Path(__file__).with_name("finality.yaml")


class FinalityConfigError(ValueError):
    """The finality file is malformed; nothing runs on a half-understood policy."""


@dataclass(frozen=True)
class ChainFinality:
    chain: str
    confirmations: int
    block_seconds: float


def parse_finality(raw: object, *, source: str = "finality.yaml") -> dict[str, ChainFinality]:
    """Validate the parsed YAML: a version and a mapping of chain to a positive integer of
    confirmations and a positive block interval."""
    if not isinstance(raw, dict) or set(raw) != {"version", "chains"}:
        raise FinalityConfigError(f"{source}: expected exactly the keys 'version' and 'chains'")
    if raw["version"] != 1:
        raise FinalityConfigError(f"{source}: unsupported version {raw['version']!r}")
    chains = raw["chains"]
    if not isinstance(chains, dict) or not chains:
        raise FinalityConfigError(f"{source}: 'chains' must be a non-empty mapping")
    policy: dict[str, ChainFinality] = {}
    for chain, entry in chains.items():
        if not isinstance(chain, str) or not chain.islower():
            raise FinalityConfigError(f"{source}: chain name {chain!r} must be lower case")
        if not isinstance(entry, dict) or set(entry) != {"confirmations", "block_seconds"}:
            raise FinalityConfigError(
                f"{source}: chain {chain!r} needs exactly 'confirmations' and 'block_seconds'"
            )
        confirmations, block_seconds = entry["confirmations"], entry["block_seconds"]
        if (
            isinstance(confirmations, bool)
            or not isinstance(confirmations, int)
            or (confirmations < 1)
        ):
            raise FinalityConfigError(f"{source}: {chain}.confirmations must be an integer >= 1")
        if (
            isinstance(block_seconds, bool)
            or not isinstance(block_seconds, int | float)
            or (block_seconds <= 0)
        ):
            raise FinalityConfigError(f"{source}: {chain}.block_seconds must be positive")
        policy[chain] = ChainFinality(chain, confirmations, float(block_seconds))
    return policy


@cache
def finality_policy() -> dict[str, ChainFinality]:
    """The reviewed policy (read once per process)."""
    with FINALITY_FILE.open() as fh:
        return parse_finality(yaml.safe_load(fh), source=str(FINALITY_FILE.name))


def chain_finality(chain: str) -> ChainFinality:
    """The finality of one chain; an unknown chain is a LookupError (never a guessed default)."""
    try:
        return finality_policy()[chain]
    except KeyError:
        raise LookupError(f"no finality policy for chain {chain!r}") from None

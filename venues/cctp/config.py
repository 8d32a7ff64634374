"""CCTP's part of the reviewed chain configuration (``venues/chains.yaml``).

An EVM chain that CCTP serves carries, beside what the EVM adapter reads::

    chains:
      ethereum:
        kind: evm
        ...
        cctp:
          domain: 0                       # Circle's domain id of the chain
          token_messenger: "0x..."        # TokenMessenger (depositForBurn)
          message_transmitter: "0x..."    # MessageTransmitter (receiveMessage, usedNonces)
          usdc: "0x..."                   # the USDC burned and minted here
          relayer: ops                    # optional: the account that submits mints here
          log_lookback_blocks: 10000      # optional: how far back a mint's log is looked for
          token_messenger_v2: "0x..."     # optional: CCTP V2's TokenMessengerV2 (cctp_v2*)
          message_transmitter_v2: "0x..." # optional: CCTP V2's MessageTransmitterV2
    iris_url_env: QTG_IRIS_URL            # the variable holding the attestation service's URL

Addresses are public: they live in the file. The Iris URL is named by a variable (Circle's
sandbox and production services differ per deployment; the local stand-in's port is free).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from venues import conf
from venues.ethlib import Web3

USDC_DECIMALS = 6
USDC_UNIT = Decimal(10) ** -USDC_DECIMALS


@dataclass(frozen=True)
class CctpChain:
    name: str
    domain: int
    token_messenger: str
    message_transmitter: str
    usdc: str
    relayer: str  # the account that submits mints on this chain ('' : see CctpMint)
    log_lookback_blocks: int
    entry: dict[str, Any]  # the chain's whole entry (the EVM adapter reads the rest)
    token_messenger_v2: str = ""  # CCTP V2 ('' : V2 is not deployed here)
    message_transmitter_v2: str = ""

    @property
    def has_v2(self) -> bool:
        return bool(self.token_messenger_v2 and self.message_transmitter_v2)


def _address(value: Any, where: str) -> str:
    if not isinstance(value, str) or not Web3.is_address(value):
        raise ImproperlyConfigured(f"{where}: not an address: {value!r}")
    return Web3.to_checksum_address(value)


DEFAULT_LOOKBACK_BLOCKS = 10_000


def _lookback(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImproperlyConfigured(f"{where}.log_lookback_blocks must be a positive integer")
    return value


def cctp_chains() -> dict[str, CctpChain]:
    """Every configured chain with a ``cctp`` block, by chain name (parsed once per version
    of the file)."""
    return conf.parsed("chains", "cctp", _parse_cctp_chains)


def _parse_cctp_chains() -> dict[str, CctpChain]:
    found: dict[str, CctpChain] = {}
    for name, entry in conf.section("chains", "chains").items():
        block = (entry or {}).get("cctp")
        if not block:
            continue
        where = f"{conf.config_path('chains')}: chains.{name}.cctp"
        if not isinstance(block, dict):
            raise ImproperlyConfigured(f"{where} must be a mapping")
        domain = block.get("domain")
        if isinstance(domain, bool) or not isinstance(domain, int) or domain < 0:
            raise ImproperlyConfigured(f"{where}.domain must be a non-negative integer")
        found[str(name)] = CctpChain(
            str(name),
            domain,
            _address(block.get("token_messenger"), f"{where}.token_messenger"),
            _address(block.get("message_transmitter"), f"{where}.message_transmitter"),
            _address(block.get("usdc"), f"{where}.usdc"),
            str(block.get("relayer") or ""),
            _lookback(block.get("log_lookback_blocks", DEFAULT_LOOKBACK_BLOCKS), where),
            dict(entry),
            *_v2_addresses(block, where),
        )
    return found


def _v2_addresses(block: dict[str, Any], where: str) -> tuple[str, str]:
    messenger, transmitter = block.get("token_messenger_v2"), block.get("message_transmitter_v2")
    if not messenger and not transmitter:
        return "", ""
    return (
        _address(messenger, f"{where}.token_messenger_v2"),
        _address(transmitter, f"{where}.message_transmitter_v2"),
    )


def cctp_chain(name: str) -> CctpChain:
    """The CCTP configuration of chain ``name``; LookupError when it has none."""
    chain = cctp_chains().get(name)
    if chain is None:
        raise LookupError(
            f"chain {name!r} has no cctp configuration in {conf.config_path('chains')}"
        )
    return chain


def iris_url() -> str:
    """The attestation service's base URL, from the variable ``iris_url_env`` names."""
    variable = conf.load("chains").get("iris_url_env")
    if not variable:
        raise ImproperlyConfigured(f"{conf.config_path('chains')}: iris_url_env is not set")
    value = os.environ.get(str(variable), "")
    if not value:
        raise ImproperlyConfigured(f"environment variable {variable} (the Iris URL) is empty")
    return value


def to_units(amount: Decimal) -> int:
    """``amount`` USDC in the token's smallest unit; ValueError when it is finer than that."""
    units = amount / USDC_UNIT
    if units != units.to_integral_value():
        raise ValueError(f"{amount} USDC is finer than {USDC_DECIMALS} decimals")
    return int(units)

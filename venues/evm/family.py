"""The EVM chain family (``kind: evm``): 0x + 40 hex addresses, compared in lower case (the
EIP-55 checksum is only a spelling, but a mixed-case address with a wrong checksum is a typo),
nonce-ordered transactions with EIP-1559 fees, finality by the ``finalized`` tag, a depth, or
both (``venues.evm.config.Finality``)."""

import re
from decimal import Decimal
from typing import Any

from eth_utils import is_checksum_address, to_checksum_address

from qtg.core.chains import (
    ChainFamily,
    FinalityPolicy,
    TxDetailField,
    coin_amount,
    register_family,
)
from qtg.core.money import format_amount
from venues.evm.calls import decode_call

ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")


def _problem(value: str) -> str | None:
    hexpart = value[2:]
    mixed_case = hexpart not in (hexpart.lower(), hexpart.upper())
    if mixed_case and not is_checksum_address(value):
        return "mixed-case EVM address with a wrong EIP-55 checksum"
    return None


GWEI = 10**9


def gwei(wei: int) -> str:
    """A gas price as a person reads it: ``30.5 gwei``."""
    return f"{format_amount(Decimal(wei).scaleb(-9), grouping=True)} gwei"


def format_fee(wei: int, symbol: str = "") -> str:
    """A fee paid: ``0.000441 ETH (441,000 gwei)``."""
    return f"{coin_amount(wei, 18, symbol or 'ETH')} ({gwei(wei)})"


def _finality_policy(chain: Any) -> FinalityPolicy:
    finality = chain.finality
    words = "tag+depth" if finality.tag and finality.depth else "tag" if finality.tag else "depth"
    reason = f"; {finality.reason}" if finality.reason else ""
    return FinalityPolicy(finality.depth or None, f"{words}: {finality.describe()}{reason}")


EVM = ChainFamily(
    name="evm",
    address=ADDRESS,
    normalise=str.lower,
    format=to_checksum_address,
    problem=_problem,
    tx_fields=("nonce", "fee_paid", "block_number", "block_hash", "confirmations"),
    tx_detail=(
        TxDetailField("gas_limit", "gas limit", show=lambda units: f"{units:,}"),
        TxDetailField("max_fee_per_gas", "max fee per gas", show=gwei),
        TxDetailField("max_priority_fee_per_gas", "max priority fee per gas", show=gwei),
    ),
    finality=("tag", "depth", "tag+depth"),
    detail={
        "tag": "final at the node's `finalized` block",
        "depth": "final N blocks deep (with a reason: the chain's tag is not trusted)",
        "tag+depth": "both",
    },
    parse_chain="venues.evm.config.parse_chain",
    finality_policy=_finality_policy,
    native=("ETH", 18),
    format_fee=format_fee,
    decode_call=decode_call,
    explorer_tx_url="",  # per chain (etherscan.io, arbiscan.io, ...): chains.yaml explorer_tx_url
)


def evm_fees(tx: Any) -> dict[str, int | None]:
    """A stored EVM transaction's own fields, typed: gas_limit, max_fee_per_gas,
    max_priority_fee_per_gas (None when it has none)."""
    return EVM.tx_detail_values(tx.family_detail or {})


def register() -> None:
    register_family(EVM)

"""The Solana chain family (``kind: solana``): base58 public keys (32 to 44 characters, no
0, O, I, l), compared exactly as written (base58 is case-sensitive); transactions that name a
recent blockhash and expire; finality by commitment level."""

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from qtg.core.chains import (
    ChainFamily,
    DecodedCall,
    FinalityPolicy,
    TxDetailField,
    coin_amount,
    register_family,
)
from qtg.core.money import format_amount

ADDRESS = re.compile(r"^[1-9A-HJ-NP-Za-km-z]{32,44}$")


def format_fee(lamports: int, symbol: str = "") -> str:
    """A fee paid: ``0.000005 SOL (5,000 lamports)``."""
    return f"{coin_amount(lamports, 9, symbol or 'SOL')} ({lamports:,} lamports)"


def _finality_policy(chain: Any) -> FinalityPolicy:
    return FinalityPolicy(None, f"commitment {chain.final_commitment}")


def decode_call(unsigned: Mapping[str, Any], chain: Any = None) -> DecodedCall | None:
    """A Solana transfer as built by ``venues.solana.records`` (the message is ours: its
    asset, amount, mint and recipient are stored beside it)."""
    if not unsigned.get("to"):
        return None
    asset, amount = str(unsigned.get("asset") or "SOL"), unsigned.get("amount")
    shown = f"{format_amount(Decimal(str(amount)), grouping=True)} {asset}" if amount else "?"
    kind = "SPL token transfer" if unsigned.get("mint") else "SOL transfer"
    arguments = [("recipient", str(unsigned["to"])), ("amount", shown)]
    if unsigned.get("mint"):
        arguments.append(("mint", str(unsigned["mint"])))
    return DecodedCall(f"{kind} of {shown} to {unsigned['to']}", tuple(arguments))


SOLANA = ChainFamily(
    name="solana",
    address=ADDRESS,
    normalise=lambda value: value,
    tx_fields=("fee_paid", "block_number", "confirmations"),
    tx_detail=(
        TxDetailField("recent_blockhash", "recent blockhash", kind="text"),
        TxDetailField("last_valid_block_height", "last valid block height"),
    ),
    finality=("processed", "confirmed", "finalized"),
    detail={
        "processed": "in a block the node has seen",
        "confirmed": "voted on by a supermajority",
        "finalized": "rooted: the chain's finality",
    },
    parse_chain="venues.solana.config.parse_chain",
    finality_policy=_finality_policy,
    native=("SOL", 9),
    format_fee=format_fee,
    decode_call=decode_call,
    explorer_tx_url="https://explorer.solana.com/tx/{tx}",
)


def register() -> None:
    register_family(SOLANA)

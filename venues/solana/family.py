"""The Solana chain family (``kind: solana``): base58 public keys (32 to 44 characters, no
0, O, I, l), compared exactly as written (base58 is case-sensitive); transactions that name a
recent blockhash and expire; finality by commitment level."""

import re

from qtg.core.chains import ChainFamily, register_family

ADDRESS = re.compile(r"^[1-9A-HJ-NP-Za-km-z]{32,44}$")

SOLANA = ChainFamily(
    name="solana",
    address=ADDRESS,
    normalise=lambda value: value,
    tx_fields=("fee_paid", "block_number", "confirmations"),
    finality=("processed", "confirmed", "finalized"),
    detail={
        "processed": "in a block the node has seen",
        "confirmed": "voted on by a supermajority",
        "finalized": "rooted: the chain's finality",
    },
)


def register() -> None:
    register_family(SOLANA)

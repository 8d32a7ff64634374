"""The EVM chain family (``kind: evm``): 0x + 40 hex addresses, compared in lower case (the
EIP-55 checksum is only a spelling, but a mixed-case address with a wrong checksum is a typo),
nonce-ordered transactions with EIP-1559 fees, finality by the ``finalized`` tag, a depth, or
both (``venues.evm.config.Finality``)."""

import re

from eth_utils import is_checksum_address, to_checksum_address

from qtg.core.chains import ChainFamily, register_family

ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")


def _problem(value: str) -> str | None:
    hexpart = value[2:]
    mixed_case = hexpart not in (hexpart.lower(), hexpart.upper())
    if mixed_case and not is_checksum_address(value):
        return "mixed-case EVM address with a wrong EIP-55 checksum"
    return None


EVM = ChainFamily(
    name="evm",
    address=ADDRESS,
    normalise=str.lower,
    format=to_checksum_address,
    problem=_problem,
    tx_fields=(
        "nonce",
        "gas_limit",
        "max_fee_per_gas",
        "max_priority_fee_per_gas",
        "fee_paid",
        "block_number",
        "block_hash",
        "confirmations",
    ),
    finality=("tag", "depth", "tag+depth"),
    detail={
        "tag": "final at the node's `finalized` block",
        "depth": "final N blocks deep (with a reason: the chain's tag is not trusted)",
        "tag+depth": "both",
    },
)


def register() -> None:
    register_family(EVM)

"""A chain transaction as a person reads it (the console's chain-transaction page and the
movement page's list): everything family-specific is asked of the transaction's chain family
(``qtg.core.chains``) and its chain's reviewed config (``venues.conf``) — fees in the family's
units, the decoded call, confirmations against the chain's finality policy, the explorer link.
Reads only: nothing here writes."""

from dataclasses import dataclass
from typing import Any

from qtg.core.chains import ChainFamily, DecodedCall, FinalityPolicy, families
from venues import conf
from venues.models import ChainTransaction


def family_of(tx: ChainTransaction) -> ChainFamily | None:
    """The transaction's family: as recorded, else its chain's kind in the config."""
    return families().get(tx.family or conf.chain_kind(tx.chain))


def parsed_chain(tx: ChainTransaction) -> Any:
    """The transaction's chain as its family parsed it, or None (not configured, or a config
    that does not parse: the page still shows what the row holds)."""
    try:
        return conf.chain(tx.chain)
    except Exception:
        return None


def _native_symbol(family: ChainFamily, chain: Any) -> str:
    native = getattr(chain, "native", None)
    return getattr(native, "symbol", "") or family.native[0]


def fee_paid(tx: ChainTransaction) -> str:
    """``0.000441 ETH (441,000 gwei)`` / ``0.000005 SOL (5,000 lamports)``; "—" before the
    transaction is in a block."""
    family = family_of(tx)
    if tx.fee_paid is None:
        return "—"
    if family is None:
        return f"{int(tx.fee_paid):,} (smallest native unit)"
    return family.format_fee(int(tx.fee_paid), _native_symbol(family, parsed_chain(tx)))


def detail_rows(tx: ChainTransaction) -> list[tuple[str, str]]:
    """The family's own fields (label, as read), e.g. the gas limit and fees in gwei."""
    family = family_of(tx)
    if family is None:
        return [(name, str(value)) for name, value in (tx.family_detail or {}).items()]
    values = family.tx_detail_values(tx.family_detail or {})
    return [
        (field.label, "—" if values[field.name] is None else field.show(values[field.name]))
        for field in family.tx_detail
    ]


def decoded_call(tx: ChainTransaction) -> DecodedCall | None:
    family = family_of(tx)
    if family is None or not tx.unsigned:
        return None
    return family.decode_call(tx.unsigned, parsed_chain(tx))


def call_argument(call: DecodedCall | None, *labels: str) -> str:
    """The first of ``labels`` the call has (the amount, the recipient), or "—"."""
    found = dict(call.arguments) if call is not None else {}
    return next((found[label] for label in labels if label in found), "—")


@dataclass(frozen=True)
class Confirmations:
    count: int
    policy: FinalityPolicy | None

    def __str__(self) -> str:
        if self.policy is None:
            return f"{self.count} (no finality policy configured for this chain)"
        if self.policy.required is None:
            return f"{self.count}, final by policy {self.policy.name}"
        return f"{self.count} of {self.policy.required} required (policy {self.policy.name})"


def confirmations(tx: ChainTransaction) -> Confirmations:
    """How deep the transaction is against what its chain's finality policy requires."""
    family, chain = family_of(tx), parsed_chain(tx)
    policy = family.finality_policy(chain) if family is not None and chain is not None else None
    return Confirmations(tx.confirmations, policy)


def explorer_link(tx: ChainTransaction) -> str:
    """The transaction on its chain's explorer (the reviewed per-chain template, else the
    family's), or "" when there is none or nothing was signed yet."""
    family = family_of(tx)
    if family is None:
        return ""
    return family.explorer_link(tx.tx_hash, conf.explorer_tx_url(tx.chain))

"""What every step of the transaction manager shares: its actor, reads from the node (a timeout
or an RPC error is transient), a chain transaction's move to a state, and the stored form of an
unsigned transaction (wei values as decimal strings)."""

import logging
from typing import Any

from movements.executors.base import TransientError
from qtg.core.actors import Actor
from venues.evm import client
from venues.evm.config import EvmChain
from venues.models import ChainTransaction, TxState
from venues.transactions import chain_transaction_transition

S = TxState


log = logging.getLogger(__name__)


ACTOR = Actor.system("venues.evm")


# Fields of the stored unsigned transaction that are integers (stored as decimal strings:
# wei values do not fit JSON numbers everywhere).
INT_FIELDS = ("chainId", "nonce", "value", "gas", "maxFeePerGas", "maxPriorityFeePerGas")


def rpc_read(what: str, fn, *args, **kwargs):
    """A read from the node: a timeout or an RPC error answer is transient (asked again
    later: before a submit nothing has left the building, after it a read changes nothing)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        if client.is_network_error(exc) or client.rpc_message(exc):
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}"[:500]) from exc
        raise


def chain_of(tx: ChainTransaction) -> EvmChain:
    from venues.evm.config import evm_chain

    return evm_chain(tx.chain)


def move_tx(tx: ChainTransaction, state: str, evidence: dict[str, Any], **fields: Any) -> None:
    """Move ``tx`` (and the caller's copy) to ``state`` if it is not there already."""
    if tx.state == state:
        return
    moved = chain_transaction_transition(
        chain_transaction_id=tx.pk,
        to_state=state,
        actor=ACTOR,
        evidence=evidence,
        fields=fields or None,
        expected=[tx.state],
    )
    for name in ("state", "state_changed_at", *fields, *_STAMP_FIELDS):
        setattr(tx, name, getattr(moved, name))


_STAMP_FIELDS = ("signed_at", "broadcast_at", "pending_at", "confirmed_at", "finalized_at")


def unsigned_for_signing(unsigned: dict[str, Any]) -> dict[str, Any]:
    tx = dict(unsigned)
    for name in INT_FIELDS:
        if name in tx:
            tx[name] = int(tx[name])
    tx["type"] = 2
    return tx


def stored_fields(tx: dict[str, Any]) -> dict[str, Any]:
    return {name: (str(value) if name in INT_FIELDS else value) for name, value in tx.items()}

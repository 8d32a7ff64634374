"""Broadcast: the stored bytes handed to the node, its answer classified (sent, already
known, nonce used, nonce ahead, refused). A lost answer is ambiguous, never a failure."""

from dataclasses import dataclass
from typing import Any

from movements.executors.base import AmbiguousError, ExecutionContext, TransientError
from venues.evm import client
from venues.evm.faults import crash_point
from venues.evm.tx.common import ACTOR, S, chain_of, move_tx
from venues.models import ChainTransaction
from venues.transactions import chain_transaction_record


@dataclass
class Sent:
    """What the node said to the stored bytes."""

    outcome: str  # sent | known | nonce_used | nonce_ahead | refused
    message: str = ""


def send_stored(w3: Any, tx: ChainTransaction) -> Sent:
    """Hand the stored bytes to the node. Network errors propagate (the caller decides what
    they mean at its step)."""
    try:
        w3.eth.send_raw_transaction(tx.raw_signed)
    except Exception as exc:
        message = client.rpc_message(exc)
        if not message:
            raise
        if client.says(message, client.ALREADY_KNOWN):
            return Sent("known", message)
        if client.says(message, client.NONCE_USED):
            return Sent("nonce_used", message)
        if client.says(message, client.NONCE_AHEAD):
            return Sent("nonce_ahead", message)
        return Sent("refused", message)
    return Sent("sent")


def broadcast_transfer(tx: ChainTransaction, ctx: ExecutionContext | None = None) -> Sent:
    """The submit of a signed transfer: its stored bytes to the node, then BROADCAST. A lost
    answer or any error that leaves doubt is ambiguous (the node goes UNKNOWN and recovery
    looks the hash up); "nonce too low" is never read as a failure without that look. The
    send leaves only after ``ctx.fence`` proved this worker still holds the node's lease
    (``LeaseLost``: nothing is sent)."""
    chain_cfg = chain_of(tx)
    w3 = client.web3_for(chain_cfg)
    crash_point("before_broadcast", tx.chain)
    if ctx is not None:
        ctx.fence(chain_cfg.rpc_timeout_seconds)
    try:
        sent = send_stored(w3, tx)
    except Exception as exc:
        # The answer is lost, not necessarily the send: the hash tells at once whether the
        # node has it (then it was sent, no doubt left); else the doubt goes to recovery.
        if _known_by_hash(w3, tx):
            move_tx(
                tx, S.BROADCAST, {"answer_lost": f"{type(exc).__name__}", "found_by_hash": True}
            )
            return Sent("known", f"answer lost ({type(exc).__name__}); found by its hash")
        raise AmbiguousError(
            f"broadcast of {tx.tx_hash}: {type(exc).__name__}: {exc}"[:500],
            evidence={"tx_hash": tx.tx_hash},
        ) from exc
    crash_point("after_broadcast", tx.chain)
    if sent.outcome in ("sent", "known"):
        move_tx(tx, S.BROADCAST, {"rpc": sent.outcome, "message": sent.message})
        return sent
    if sent.outcome == "nonce_used":
        # Ours already, mined or pending? Only the hash can tell.
        if client.receipt_of(w3, tx.tx_hash) or client.transaction_of(w3, tx.tx_hash):
            move_tx(tx, S.BROADCAST, {"rpc": sent.message, "found_by_hash": True})
            return sent
        raise AmbiguousError(
            f"{sent.message}: the chain does not know {tx.tx_hash} (yet)",
            evidence={"tx_hash": tx.tx_hash, "nonce": tx.nonce},
        )
    if sent.outcome == "nonce_ahead":
        # Refused, not taken: a lower nonce of the sender is not in the node yet (its gap
        # is being filled). Nothing left the building; the same bytes again later.
        chain_transaction_record(
            chain_transaction_id=tx.pk, actor=ACTOR, evidence={"nonce_ahead": sent.message}
        )
        raise TransientError(
            f"{tx.tx_hash}: {sent.message} (waiting for the sender's lower nonces)",
            evidence={"tx_hash": tx.tx_hash, "nonce": tx.nonce, "nonce_ahead": sent.message},
            retry_after=chain_of(tx).block_seconds,
        )
    chain_transaction_record(
        chain_transaction_id=tx.pk,
        actor=ACTOR,
        evidence={"broadcast_refused": sent.message},
    )
    raise AmbiguousError(
        f"the node refused {tx.tx_hash}: {sent.message}",
        evidence={
            "tx_hash": tx.tx_hash,
            "refused": sent.message,
            "attention": {
                "reason": "broadcast_refused",
                "message": f"the node refused the signed transaction: {sent.message}",
            },
        },
    )


def _known_by_hash(w3: Any, tx: ChainTransaction) -> bool:
    """Whether the node has ``tx`` (mined or in its pool); False when it cannot say."""
    try:
        return bool(client.receipt_of(w3, tx.tx_hash) or client.transaction_of(w3, tx.tx_hash))
    except Exception as exc:
        if client.is_network_error(exc) or client.rpc_message(exc):
            return False
        raise

"""A node's Solana transactions in the shared chain-transaction table (``venues.models``).

One node may own several transactions over its life, one after the other: a transaction whose
blockhash expired before it landed is EXPIRED (terminal, it keeps its history) and the transfer
continues in a NEW transaction on a fresh blockhash, whose ``replaces`` points at it. A new one
is built only once the old one is proven dead (``fate.Fate.EXPIRED``), so at most one of them
can ever land. The signed bytes are stored (SIGNED) before they are handed to any RPC node
(BROADCAST is recorded before the send), so a retry or a recovery re-sends exactly them.
"""

import base64
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.utils import timezone
from solders.pubkey import Pubkey

from qtg.core.actors import Actor
from venues.models import ChainTransaction, TxState
from venues.transactions import (
    chain_transaction_count_confirmations,
    chain_transaction_create,
    chain_transaction_record,
    chain_transaction_transition,
)

from .config import Account, SolanaChain, Token
from .endpoints import absence_cross_check
from .fate import Fate, Seen, fate
from .rpc import SolanaRpcClient
from .transactions import SignedTransfer, message_base64, transfer_message

S = TxState
ACTOR = Actor.system("venues.solana")


@dataclass(frozen=True)
class Transfer:
    """What one transfer node moves: resolved from the reviewed config and the movement."""

    chain: SolanaChain
    account: Account
    token: Token
    recipient: Pubkey
    amount: Decimal
    units: int


def latest_transaction(node_id: int) -> ChainTransaction | None:
    """The node's newest transaction: the one that carries the transfer now."""
    return ChainTransaction.objects.filter(node_id=node_id).order_by("-id").first()


def expired_count(node_id: int) -> int:
    return ChainTransaction.objects.filter(node_id=node_id, state=S.EXPIRED).count()


def transaction_by_signature(chain: str, signature: str) -> ChainTransaction | None:
    return ChainTransaction.objects.filter(chain=chain, tx_hash=signature).first()


def signed_transfer(record: ChainTransaction) -> SignedTransfer:
    """The payload of a signed record (what the node persists and submits)."""
    return SignedTransfer(
        chain_transaction_id=record.pk,
        signature=record.tx_hash,
        raw_base64=record.raw_signed,
        blockhash=record.unsigned["blockhash"],
        last_valid_block_height=int(record.unsigned["last_valid_block_height"]),
    )


def sign_new_transaction(
    rpc: SolanaRpcClient,
    transfer: Transfer,
    *,
    request_id: Any,
    node_id: int,
    replaces: ChainTransaction | None = None,
) -> ChainTransaction:
    """A fresh blockhash, a CREATED record, the signer's signature, then SIGNED with the raw
    bytes and the signature stored: nothing has been sent yet."""
    chain = transfer.chain
    blockhash, last_valid = rpc.latest_blockhash(chain.blockhash_commitment)
    message = transfer_message(
        token=transfer.token,
        sender=transfer.account.address,
        recipient=transfer.recipient,
        units=transfer.units,
        blockhash=blockhash,
    )
    unsigned = {
        "asset": transfer.token.asset,
        "amount": str(transfer.amount),
        "units": transfer.units,
        "mint": str(transfer.token.mint) if transfer.token.mint else None,
        "to": str(transfer.recipient),
        "blockhash": str(blockhash),
        "last_valid_block_height": last_valid,
        "message": message_base64(message),
    }
    evidence = {"replaces": replaces.tx_hash} if replaces is not None else {}
    record = chain_transaction_create(
        chain=chain.name,
        sender=str(transfer.account.address),
        nonce=None,
        unsigned=unsigned,
        actor=ACTOR,
        movement_id=request_id,
        node_id=node_id,
        replaces=replaces,
        family="solana",
        detail={"recent_blockhash": str(blockhash), "last_valid_block_height": last_valid},
        evidence=evidence,
    )
    return sign_record(chain, transfer.account, record)


def sign_record(chain: SolanaChain, account: Account, record: ChainTransaction) -> ChainTransaction:
    """CREATED -> SIGNED (a record left CREATED by a worker that died is signed as it is)."""
    signer = chain.signer(account)
    signed = signer.sign_transaction(chain.name, {"message": record.unsigned["message"]})
    return chain_transaction_transition(
        chain_transaction_id=record.pk,
        to_state=S.SIGNED,
        actor=ACTOR,
        expected=[S.CREATED],
        fields={"tx_hash": signed.tx_hash, "raw_signed": base64.b64encode(signed.raw).decode()},
        evidence={"signature": signed.tx_hash, "signer": signer.address()},
    )


def mark_broadcast(record: ChainTransaction) -> ChainTransaction:
    """Recorded before the bytes are handed to an RPC node: first time SIGNED -> BROADCAST,
    later sends of the same bytes as evidence on the record."""
    now = timezone.now()
    if record.state == S.SIGNED:
        return chain_transaction_transition(
            chain_transaction_id=record.pk,
            to_state=S.BROADCAST,
            actor=ACTOR,
            expected=[S.SIGNED],
            evidence={"sent": "signed bytes"},
        )
    return chain_transaction_record(
        chain_transaction_id=record.pk,
        actor=ACTOR,
        evidence={"rebroadcast": "the same signed bytes"},
        fields={"broadcast_at": now},
    )


def read_chain(rpc: SolanaRpcClient, chain: SolanaChain, record: ChainTransaction) -> Seen:
    """One reading: the signature's status; if it has not landed, the final block height,
    then the finalized slot (read after it, so at or past the slot of that height), the
    blockhash's validity, and the status once more with its answer's context slot. Expiry is
    concluded only when that second null status covers the finalized slot: a status view
    that lags behind a landing is never mistaken for an expiry. Where the chain lists several
    endpoints, every one is then asked (``endpoints.absence_cross_check``): a landing at any
    of them is read as landed, and a disagreement is carried in ``Seen.contradiction``."""
    status = rpc.status(record.tx_hash)
    last_valid = int(record.unsigned["last_valid_block_height"])
    if status is None:
        final = chain.final_commitment
        final_height = rpc.block_height(final)
        final_slot = rpc.slot(final)
        valid = rpc.blockhash_valid(record.unsigned["blockhash"], final)
        status, status_slot = rpc.status_at(record.tx_hash)
        if status is None and chain.rpc_endpoints:
            # Several endpoints: none may show it, each not lagging must cover that slot.
            check = absence_cross_check(chain, record.tx_hash, decisive_slot=final_slot)
            if check.landing is None:
                return Seen(
                    None,
                    None,
                    None,
                    final_height,
                    valid,
                    last_valid,
                    status_slot=status_slot,
                    final_slot=final_slot,
                    contradiction=check.contradiction,
                    endpoints=tuple(check.answers),
                )
            # A landing seen at any endpoint: landed, read through that endpoint.
            status, rpc = check.landing, check.seen_by
            return _landed(rpc, record, status, last_valid, check.seen_at, check.answers)
        if status is None:
            return Seen(
                None,
                None,
                None,
                final_height,
                valid,
                last_valid,
                status_slot=status_slot,
                final_slot=final_slot,
            )
    return _landed(rpc, record, status, last_valid)


def _landed(rpc, record, status, last_valid, seen_at=None, answers=()) -> Seen:
    err = None if status.err is None else str(status.err)
    level = _level(status)
    # The fee is money too: read once, when the transaction is deep enough to be fetched.
    fee = None
    if record.fee_paid is None and level != "processed":
        fee = rpc.fee(record.tx_hash)
    return Seen(
        status.slot,
        level,
        err,
        0,
        True,
        last_valid,
        status.confirmations,
        fee,
        endpoints=tuple(answers),
        seen_at=seen_at,
    )


def _level(status) -> str:
    """processed / confirmed / finalized. A node too old to say counts by confirmations
    (None means finalized, as the RPC documents)."""
    if status.confirmation_status is not None:
        return str(status.confirmation_status).rsplit(".", 1)[-1].lower()
    return "finalized" if status.confirmations is None else "processed"


def record_seen(record: ChainTransaction, seen: Seen, *, final: str) -> ChainTransaction:
    """Bring the record to what the chain shows (the chain's final commitment decides
    FINALIZED). Returns the record as it now stands."""
    evidence = {
        "slot": seen.landed_slot,
        "commitment": seen.level,
        "err": seen.err,
        "final_height": seen.final_height,
        "blockhash_valid": seen.blockhash_valid,
        "last_valid_block_height": seen.last_valid_block_height,
        "status_context_slot": seen.status_slot,
        "final_slot": seen.final_slot,
        **_endpoint_evidence(seen),
    }
    if seen.landed_slot is None:
        if record.state == S.CONFIRMED:
            # It was in a block and is not any more: the block was abandoned.
            return _move(record, S.PENDING, {**evidence, "reorg": "left its block"})
        return record
    settled_state = _landed_state(seen, final=final)
    if record.state in (S.SIGNED, S.BROADCAST, S.PENDING):
        fields = {"block_number": seen.landed_slot}
        record = _move(record, S.CONFIRMED, evidence, fields)
    if settled_state != S.CONFIRMED and record.state == S.CONFIRMED:
        record = _move(record, settled_state, evidence)
    if record.state == S.CONFIRMED and seen.confirmations is not None:
        chain_transaction_count_confirmations(
            chain_transaction_id=record.pk, confirmations=seen.confirmations
        )
    if seen.fee is not None and record.fee_paid is None:
        record = chain_transaction_record(
            chain_transaction_id=record.pk,
            actor=ACTOR,
            evidence={"fee_lamports": seen.fee},
            fields={"fee_paid": seen.fee},
        )
    return record


def walk_back_final(record: ChainTransaction, evidence: dict) -> ChainTransaction:
    """FINALIZED -> PENDING: a final reorg took it away (the ledger's entry is compensated by
    the chain-transaction service, append-only)."""
    return _move(record, S.PENDING, {"final_reorg": evidence}, {"block_number": None})


def _landed_state(seen: Seen, *, final: str) -> TxState:
    outcome = fate(seen, wanted=final)
    if outcome == Fate.FAILED:
        return S.FAILED
    if outcome == Fate.SETTLED:
        return S.FINALIZED
    return S.CONFIRMED


def mark_expired(record: ChainTransaction, seen: Seen) -> ChainTransaction:
    """Terminal: its blockhash is past its last valid height and it never landed (the null
    status answered at a context slot covering the finalized slot of that height)."""
    evidence = {
        "final_height": seen.final_height,
        "final_slot": seen.final_slot,
        "last_valid_block_height": seen.last_valid_block_height,
        "blockhash_valid": seen.blockhash_valid,
        "status": None,
        "status_context_slot": seen.status_slot,
        **_endpoint_evidence(seen),
    }
    return _move(record, S.EXPIRED, evidence)


def _endpoint_evidence(seen: Seen) -> dict[str, Any]:
    """Each endpoint's answer, when the chain lists several and they were asked."""
    if not seen.endpoints:
        return {}
    evidence: dict[str, Any] = {"endpoints": list(seen.endpoints)}
    if seen.contradiction is not None:
        evidence["contradiction"] = seen.contradiction
    if seen.seen_at is not None:
        evidence["seen_at"] = seen.seen_at
    return evidence


def mark_failed(record: ChainTransaction, seen: Seen) -> ChainTransaction:
    """Landed with an error at the commitment the node waits for: fees paid, nothing moved."""
    if record.state == S.FAILED:
        return record
    return _move(record, S.FAILED, {"slot": seen.landed_slot, "err": seen.err})


def mark_refused(record: ChainTransaction, message: str) -> ChainTransaction:
    """The RPC node refused the transaction at preflight: it was never taken, never lands."""
    return _move(record, S.FAILED, {"refused": message[:500]})


def _move(
    record: ChainTransaction,
    state: TxState,
    evidence: dict[str, Any],
    fields: dict[str, Any] | None = None,
) -> ChainTransaction:
    return chain_transaction_transition(
        chain_transaction_id=record.pk,
        to_state=state,
        actor=ACTOR,
        expected=[record.state],
        evidence=evidence,
        fields=fields,
    )

"""Nonce gaps: a nonce a node took and will never use, filled so the sender's later
transactions can be mined.

A node signs its transaction (SIGNED: bytes and hash stored, nonce N taken) and then ends
without broadcasting it: its worker died after signing and the operator cancelled the
movement while the node was back in READY, or the node failed before its submit. Nothing
will ever send N, and every later transaction of the sender waits behind the gap.

The orphan itself is never broadcast (that would move money for a movement that ended).
Its nonce is filled instead by a zero-value self-transfer (to = sender, value 0, fees from
the chain's policy, raised above the orphan's own so it would also win against a copy of the
orphan somewhere in a mempool), signed by the account's signer and stored as its own
``ChainTransaction`` (``purpose`` NONCE_FILL, ``replaces`` = the orphan). In the same database
transaction the orphan becomes REPLACED with the evidence "nonce filled by <hash>": from then
on nothing can broadcast it (no edge leads out of REPLACED). The filler is then broadcast and
tracked to finality like any transaction (re-broadcast from its stored bytes, CONFIRMED,
FINALIZED).

``fill_nonce_gaps`` runs where the sender's stuck transactions are looked at: in every look
``track`` takes at a node of that sender (so a later transfer waiting behind the gap fills
it, without an operator). It is idempotent and safe with several workers: a fill happens
under the lock of the sender's nonce cursor and of the orphan's row, and a nonce already
filled is never filled again. A routine fill raises no attention; it is recorded as the
events of the two transactions and logged.
"""

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.utils import timezone

from movements.public import TERMINAL_NODE_STATES, TERMINAL_REQUEST_STATES
from qtg.core.errors import StaleState
from venues.evm import client
from venues.evm.config import EvmChain
from venues.evm.family import evm_fees
from venues.evm.tx.build import fees, signer_of_tx
from venues.evm.tx.common import ACTOR, move_tx, rpc_read, stored_fields
from venues.evm.tx.sign import sign_stored
from venues.evm.tx.track import confirm, follow
from venues.models import ChainTransaction, NonceCursor, TxPurpose, TxState
from venues.transactions import chain_transaction_create

S = TxState
log = logging.getLogger(__name__)

SELF_TRANSFER_GAS = 21_000
# States in which a transaction of ours holds its nonce on the network (or may).
HOLDING = (S.BROADCAST, S.PENDING, S.CONFIRMED, S.FINALIZED)


@dataclass
class GapReport:
    """What one sweep of a sender did."""

    filled: list[ChainTransaction] = field(default_factory=list)  # fillers signed now
    settled: list[ChainTransaction] = field(default_factory=list)  # orphans closed otherwise
    tracked: list[ChainTransaction] = field(default_factory=list)  # fillers looked at


def held_unsigned(chain: EvmChain, sender: str, *, now) -> list[int]:
    """The sender's CREATED transactions of live nodes older than the chain's
    ``unsigned_release_seconds`` with a later nonce of the sender waiting behind them: a node
    that keeps dying before it signs holds the sender's queue; its nonce is filled (bounded
    time) and the node takes a new one when it signs (``node_transactions`` no longer lists a
    transaction filled before it was signed)."""
    cutoff = now - timedelta(seconds=chain.unsigned_release_seconds)
    held = ChainTransaction.objects.filter(
        chain=chain.name,
        sender=sender,
        purpose=TxPurpose.NODE,
        node__isnull=False,
        nonce__isnull=False,
        state=S.CREATED,
        created_at__lt=cutoff,
    ).order_by("nonce")
    waiting = ChainTransaction.objects.filter(chain=chain.name, sender=sender)
    return [
        tx.pk
        for tx in held
        if waiting.filter(nonce__gt=tx.nonce).exclude(state__in=[S.CREATED]).exists()
    ]


def orphans(chain: str, sender: str):
    """The sender's CREATED/SIGNED transactions with a nonce whose node attempt (or
    movement) has ended: nothing will ever broadcast them. A transaction without a node is
    the sender's own (the CCTP allowance approve, shared by every burn of the sender): never
    an orphan while it can land; whoever looks at the sender's allowances signs and sends it
    (``venues.cctp.allowance``)."""
    ended = Q(node__node_state__in=[str(s) for s in TERMINAL_NODE_STATES]) | Q(
        movement__request_state__in=[str(s) for s in TERMINAL_REQUEST_STATES]
    )
    return (
        ChainTransaction.objects.filter(
            chain=chain,
            sender=sender,
            purpose=TxPurpose.NODE,
            nonce__isnull=False,
            node__isnull=False,
            state__in=[S.CREATED, S.SIGNED],
        )
        .filter(ended)
        .order_by("nonce", "id")
    )


def fillers(chain: str, sender: str, nonce: int | None = None):
    found = ChainTransaction.objects.filter(
        chain=chain, sender=sender, purpose=TxPurpose.NONCE_FILL
    )
    return found if nonce is None else found.filter(nonce=nonce)


def fill_nonce_gaps(
    chain: EvmChain,
    sender: str,
    *,
    w3: Any = None,
    head: int | None = None,
    now=None,
    hint: "GapHint | None" = None,
) -> GapReport:
    """Fill every nonce of ``sender`` on ``chain`` an ended node left unused, and move the
    fillers not final yet along (broadcast, re-broadcast, confirmations). ``hint``: the
    sender's ``GapHint`` if the caller read it with its own rows (``with_gap_hint``); else it
    is read now."""
    now = now or timezone.now()
    w3 = w3 or client.web3_for(chain)
    report = GapReport()
    if hint is None:
        hint = gap_hint(chain.name, sender)
    if not hint.anything_to_do(chain, now=now):
        return report
    candidates = list(orphans(chain.name, sender).values_list("pk", flat=True))
    candidates += [pk for pk in held_unsigned(chain, sender, now=now) if pk not in candidates]
    if candidates or fillers(chain.name, sender).exclude(state__in=_DONE).exists():
        if head is None:
            head = rpc_read("block number", lambda: w3.eth.block_number)
        used = rpc_read("nonce", w3.eth.get_transaction_count, sender, "latest")
        for pk in candidates:
            _close_orphan(w3, chain, sender, pk, used=used, head=head, report=report)
        for filler in fillers(chain.name, sender).exclude(state__in=_DONE).order_by("nonce"):
            try:
                follow(w3, chain, filler, head=head, now=now)
            except StaleState:
                continue  # another worker's look moved it meanwhile
            report.tracked.append(filler)
    return report


_DONE = [S.FINALIZED, S.FAILED, S.REPLACED, S.DROPPED]

# Whether the sweep may have something to do for a sender, over its few unsent transactions
# and its fillers: a filler not done, or a CREATED/SIGNED transaction of a node that ended (an
# orphan), or one CREATED before the chain's release cutoff (maybe held). A yes is checked
# exactly by the sweep (every look at a node of the sender asks, and the answer is nearly
# always no).
_UNSENT_OF_A_NODE = Q(purpose=TxPurpose.NODE, node__isnull=False, state__in=[S.CREATED, S.SIGNED])
_WORK = (Q(purpose=TxPurpose.NONCE_FILL) & ~Q(state__in=_DONE)) | (
    _UNSENT_OF_A_NODE
    & (
        Q(node__node_state__in=[str(state) for state in TERMINAL_NODE_STATES])
        | Q(movement__request_state__in=[str(state) for state in TERMINAL_REQUEST_STATES])
    )
)
_MAYBE_HELD = Q(purpose=TxPurpose.NODE, node__isnull=False, state=S.CREATED)


@dataclass(frozen=True)
class GapHint:
    """What says whether a sender's nonce-gap sweep may have work (see ``_WORK``): a filler
    or an orphan exists, and the oldest CREATED transaction of a node (held past the chain's
    release cutoff?)."""

    work: bool
    oldest_created: Any = None  # datetime | None

    def anything_to_do(self, chain: EvmChain, *, now) -> bool:
        cutoff = now - timedelta(seconds=chain.unsigned_release_seconds)
        return self.work or (self.oldest_created is not None and self.oldest_created < cutoff)


def gap_hint(chain: str, sender: str) -> GapHint:
    """The sender's ``GapHint``: one statement, read as a look reads it (``with_gap_hint``)
    with any one of the sender's rows; a sender with none has no gap to fill."""
    row = with_gap_hint(ChainTransaction.objects.filter(chain=chain, sender=sender)).first()
    return hint_of(row) if row is not None else GapHint(work=False)


def with_gap_hint(transactions):
    """``transactions`` (a queryset of one sender's rows) with the sender's ``GapHint`` read
    in the same statement (``hint_of`` reads it off a row): a look at a node's transactions
    learns whether the sender's gap sweep has work without a statement of its own."""
    sender = ChainTransaction.objects.filter(chain=OuterRef("chain"), sender=OuterRef("sender"))
    return transactions.annotate(
        gap_work=Exists(sender.filter(_WORK)),
        gap_oldest_created=Subquery(
            sender.filter(_MAYBE_HELD).order_by("created_at").values("created_at")[:1]
        ),
    )


def hint_of(tx: ChainTransaction) -> GapHint | None:
    """The ``GapHint`` ``with_gap_hint`` read with ``tx`` (None if it was not)."""
    if not hasattr(tx, "gap_work"):
        return None
    return GapHint(work=bool(tx.gap_work), oldest_created=tx.gap_oldest_created)


def _close_orphan(
    w3: Any, chain: EvmChain, sender: str, pk: int, *, used: int, head: int, report: GapReport
) -> None:
    """One orphan: filled, or closed because its nonce is used already (never broadcast)."""
    mined = None
    with transaction.atomic():
        # The cursor lock serialises this with nonce allocation and with other sweeps of the
        # sender; the row lock with a late signer of the orphan.
        cursor = (
            NonceCursor.objects.select_for_update().filter(chain=chain.name, sender=sender).first()
        )
        orphan = ChainTransaction.objects.select_for_update().get(pk=pk)
        if orphan.state not in (S.CREATED, S.SIGNED):
            return  # closed by another sweep meanwhile
        nonce = int(orphan.nonce)
        why = _why(orphan)
        filler = fillers(chain.name, orphan.sender, nonce).order_by("id").first()
        if filler is not None and filler.tx_hash:
            _replace(orphan, filler, why)
            report.settled.append(orphan)
            return
        holder = (
            ChainTransaction.objects.filter(
                chain=chain.name, sender=orphan.sender, nonce=nonce, state__in=HOLDING
            )
            .exclude(pk=orphan.pk)
            .order_by("id")
            .first()
        )
        if holder is not None:
            # A transaction of ours (a rival of the same node) holds the nonce: no gap.
            move_tx(orphan, S.REPLACED, {"replaced_by": holder.tx_hash, "nonce": nonce, **why})
            report.settled.append(orphan)
            return
        if nonce < used:
            # The chain used the nonce already. Ours, if the orphan's own hash has a receipt
            # (its bytes left after all: looked at below, outside the lock).
            receipt = (
                client.receipt_of(w3, orphan.tx_hash)
                if orphan.tx_hash and orphan.state == S.SIGNED
                else None
            )
            if receipt is None:
                move_tx(
                    orphan,
                    S.DROPPED,
                    {"nonce_used_on_chain": nonce, "chain_nonce": used, **why},
                )
                report.settled.append(orphan)
                return
            mined = receipt
        else:
            filler = _fill(w3, chain, orphan, why, cursor=cursor)
            report.filled.append(filler)
            log.info(
                "nonce %s of %s on %s filled by %s (orphan %s: %s)",
                nonce,
                orphan.sender,
                chain.name,
                filler.tx_hash,
                orphan.tx_hash or orphan.pk,
                why["orphaned"],
            )
            return
    # The orphan's bytes were mined although its node ended before submitting: money moved
    # for a movement that ended. Recorded on the transaction, logged as an error.
    confirm(orphan, mined, head, chain)
    log.error(
        "chain transaction %s (%s) of an ended node was mined: %s",
        orphan.pk,
        orphan.tx_hash,
        why["orphaned"],
    )


def _why(orphan: ChainTransaction) -> dict[str, Any]:
    node_state = orphan.node.node_state if orphan.node_id else None
    movement_state = orphan.movement.request_state if orphan.movement_id else None
    ended = node_state in {str(s) for s in TERMINAL_NODE_STATES} or movement_state in {
        str(s) for s in TERMINAL_REQUEST_STATES
    }
    held = "" if ended else " (held unsigned by a live node past unsigned_release_seconds)"
    return {
        "orphaned": f"node {node_state}, movement {movement_state}, "
        f"{orphan.state} and never broadcast{held}",
        "node_id": orphan.node_id,
        "node_state": node_state,
        "movement_state": movement_state,
    }


def _replace(orphan: ChainTransaction, filler: ChainTransaction, why: dict[str, Any]) -> None:
    move_tx(
        orphan,
        S.REPLACED,
        {
            "nonce_filled_by": filler.tx_hash,
            "message": f"nonce filled by {filler.tx_hash}",
            "nonce": orphan.nonce,
            **why,
        },
    )


def _fill(
    w3: Any, chain: EvmChain, orphan: ChainTransaction, why: dict[str, Any], *, cursor
) -> ChainTransaction:
    """The filler of ``orphan``'s nonce, signed and stored, the orphan REPLACED by it (one
    database transaction: the caller's). Not broadcast yet (``_track_filler`` does it)."""
    base, max_fee, tip = fees(w3, chain)
    orphan_fees = evm_fees(orphan)
    orphan_max, orphan_tip = orphan_fees["max_fee_per_gas"], orphan_fees["max_priority_fee_per_gas"]
    if orphan_max is not None and orphan_tip is not None:
        # Above the orphan's own fees by the chain's bump rule: should a copy of the orphan be
        # in some mempool after all, the filler replaces it there.
        tip = max(tip, chain.bumped(orphan_tip))
        max_fee = max(max_fee, chain.bumped(orphan_max), base + tip)
        # Never above the cap (``fees`` checked the base fee leaves room under it).
        max_fee = min(max_fee, chain.max_fee_wei)
        tip = min(tip, max_fee)
    unsigned = {
        "chainId": chain.chain_id,
        "nonce": int(orphan.nonce),
        "to": orphan.sender,
        "value": 0,
        "data": "0x",
        "gas": SELF_TRANSFER_GAS,
        "maxFeePerGas": max_fee,
        "maxPriorityFeePerGas": tip,
    }
    filler = chain_transaction_create(
        chain=chain.name,
        sender=orphan.sender,
        nonce=int(orphan.nonce),
        unsigned=stored_fields(unsigned),
        actor=ACTOR,
        replaces=orphan,
        purpose=TxPurpose.NONCE_FILL,
        family="evm",
        detail={
            "gas_limit": SELF_TRANSFER_GAS,
            "max_fee_per_gas": max_fee,
            "max_priority_fee_per_gas": tip,
        },
        evidence={
            "nonce_fill": {
                "orphan_id": orphan.pk,
                "orphan_tx_hash": orphan.tx_hash,
                "nonce": orphan.nonce,
                "cursor_next_nonce": cursor.next_nonce if cursor is not None else None,
                **why,
            }
        },
    )
    filler = sign_stored(filler, signer_of_tx(filler))
    _replace(orphan, filler, why)
    return filler


def chain_transaction_filled(orphan: ChainTransaction) -> ChainTransaction | None:
    """The filler that took ``orphan``'s nonce, if any."""
    return orphan.replacements.filter(purpose=TxPurpose.NONCE_FILL).order_by("id").first()

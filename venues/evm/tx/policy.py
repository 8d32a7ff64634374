"""The transaction manager's pure policy: facts in, actions out, no I/O (table- and
hypothesis-tested in ``tests/venues/evm/test_policy.py`` and ``test_fate.py``, like
``venues/solana/fate.py`` and ``movements/services/execution/outcomes.py``).

``track`` reads the facts and asks, in order:

1. ``after_receipts`` -- the receipts of every transaction of the node (one nonce: the
   original and its fee bumps, provisional exits included): which CONFIRMED ones a reorg took
   away (walk back), which one won the nonce (the first mined in signing order: decided from
   the mined receipt, never from which was seen first), which rivals are REPLACED by it, and
   whether the node is settled already, has nothing live (dropped / none) or needs a look at
   the mempool.
2. ``finality`` -- the one confirmations/finality rule (``head - block + 1``; final by the
   chain's reviewed ``Finality``: the ``finalized`` tag, a depth, or both).
3. ``mempool_step`` -- the newest (best-paying) transaction: sign it, mark it PENDING (the
   network has it), wait (inside the broadcast window), or re-send its stored bytes.
4. ``after_send`` -- the node's answer to stored bytes: broadcast, check who used the nonce
   (``verdict``), wait for lower nonces, or refused.
5. ``bump_step`` -- a fee bump of the sender's lowest stuck nonce, or why not now.
6. ``verdict`` -- who used the nonce, with evidence at finality: MINED, RESEND, WAIT, NOTE,
   DROP (the only conclusion of absence).
7. ``recovered`` -- what recovery of an UNKNOWN node concludes from one look.

Properties held by the tests: never FAILED (nor DROPPED) while a receipt of a transaction of
ours exists at any endpoint, unless that receipt is a revert at finality; at most one landing
per transfer (one winner per nonce, no re-send or bump once one is mined, never a second nonce
for a node that signed).
"""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

# --- 1. receipts -> winner, walk-backs, replaced -------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One transaction of the node as this look found it."""

    id: int
    state: str  # its TxState now
    signed: bool = True  # has a hash (CREATED has none)
    receipt_block: str | None = None  # the block hash of its receipt at the primary endpoint
    recorded_block: str = ""  # the block hash QTG recorded when it was CONFIRMED
    reverted_final: bool = False  # settled: FAILED with a block (a revert at finality)


LIVE = ("SIGNED", "BROADCAST", "PENDING", "CONFIRMED")
PROVISIONAL = ("REPLACED", "DROPPED")


@dataclass(frozen=True)
class AfterReceipts:
    settled: int | None = None  # FINALIZED (or reverted at finality) already: conclude from it
    walk_back: tuple[int, ...] = ()  # CONFIRMED, their block gone or moved: back to PENDING
    winner: int | None = None  # mined: confirm it
    replaced: tuple[int, ...] = ()  # its live rivals: REPLACED by the winner
    conclude: str = ""  # "dropped" | "none": nothing live, nothing mined
    mempool: int | None = None  # nothing mined: the newest live transaction to keep known


def after_receipts(txs: list[Seen], *, receipt_elsewhere: bool = False) -> AfterReceipts:
    """``txs`` oldest first. ``receipt_elsewhere``: another endpoint of the chain serves a
    receipt of one of them (asked before concluding "dropped"): then nothing is concluded,
    the look waits for the primary endpoint ("waiting")."""
    for tx in txs:
        if tx.state == "FINALIZED" or tx.reverted_final:
            return AfterReceipts(settled=tx.id)
    live = [tx for tx in txs if tx.state in LIVE or tx.state == "CREATED"]
    looked = [tx for tx in txs if tx.signed and (tx.state in LIVE or tx.state in PROVISIONAL)]
    walk_back = tuple(
        tx.id
        for tx in live
        if tx.state == "CONFIRMED"
        and (tx.receipt_block is None or tx.receipt_block != tx.recorded_block)
    )
    mined = [tx for tx in looked if tx.receipt_block is not None]
    if mined:
        winner = mined[0].id
        replaced = tuple(tx.id for tx in live if tx.id != winner)
        return AfterReceipts(walk_back=walk_back, winner=winner, replaced=replaced)
    if not live:
        dropped = bool(txs) and all(tx.state == "DROPPED" for tx in txs)
        if dropped and receipt_elsewhere:
            return AfterReceipts(walk_back=walk_back, conclude="waiting")
        return AfterReceipts(walk_back=walk_back, conclude="dropped" if dropped else "none")
    return AfterReceipts(walk_back=walk_back, mempool=live[-1].id)


# --- 2. the one confirmations / finality rule ---------------------------------------------


def confirmations(*, head: int, block: int) -> int:
    return max(0, head - block + 1)


def needs_checkpoint(finality, *, head: int, block: int) -> bool:
    """Whether the ``finalized`` block must be read to decide (a depth not reached yet
    decides alone: not final)."""
    return not finality.depth or confirmations(head=head, block=block) >= finality.depth


def final(finality, *, head: int, block: int, checkpoint: int | None) -> bool:
    """Final by the chain's reviewed policy (``venues.evm.config.Finality``)."""
    if finality.depth and confirmations(head=head, block=block) < finality.depth:
        return False
    return finality.reached(number=block, head=head, finalized=checkpoint)


# --- 3. the mempool -------------------------------------------------------------------------


class Step(StrEnum):
    SIGN = "sign"  # CREATED: sign (store the bytes) first, then look again at it
    MARK_PENDING = "mark_pending"  # the network has it
    KEEP = "keep"  # PENDING and in the pool: nothing to do
    WAIT = "wait"  # broadcast, inside the broadcast window
    RESEND = "resend"  # its stored bytes again, never re-signed


def mempool_step(
    *, state: str, in_pool: bool, since_broadcast: float | None, window: float
) -> Step:
    if state == "CREATED":
        return Step.SIGN
    if in_pool:
        return Step.MARK_PENDING if state in ("SIGNED", "BROADCAST") else Step.KEEP
    if state == "BROADCAST" and since_broadcast is not None and since_broadcast < window:
        return Step.WAIT
    return Step.RESEND


RESEND_REASONS = {
    "SIGNED": "signed, never handed to a node",
    "BROADCAST": "not seen within the broadcast window",
    "PENDING": "left the mempool",
}


# --- 4. the node's answer to stored bytes ---------------------------------------------------


class Answer(StrEnum):
    BROADCAST = "broadcast"  # sent / already known: BROADCAST
    CHECK_NONCE = "check_nonce"  # "nonce too low": who used it? (``verdict``), never a failure
    WAIT_LOWER = "wait_lower"  # "nonce too high": the sender's lower nonces first (no page)
    REFUSED = "refused"  # anything else: recorded, looked at again (an operator told)


def after_send(outcome: str) -> Answer:
    return {
        "sent": Answer.BROADCAST,
        "known": Answer.BROADCAST,
        "nonce_used": Answer.CHECK_NONCE,
        "nonce_ahead": Answer.WAIT_LOWER,
    }.get(outcome, Answer.REFUSED)


# --- 5. fee bump ----------------------------------------------------------------------------


class Bump(StrEnum):
    NOT_YET = "not_yet"  # not stuck long enough
    WAIT_LOWER = "wait_lower"  # a lower nonce of the sender is stuck: bump that one
    WAIT_RECEIPT = "wait_receipt"  # the nonce is used at the head: a bump could never be mined
    BUMP = "bump"


def bump_step(
    *,
    stuck_seconds: float,
    replace_after: float,
    lower_unconfirmed: bool,
    nonce: int,
    used_at_head: int | None,
) -> Bump:
    """``used_at_head``: the sender's transaction count at the head (read only when the first
    two checks pass; None before)."""
    if stuck_seconds < replace_after:
        return Bump.NOT_YET
    if lower_unconfirmed:
        return Bump.WAIT_LOWER
    if used_at_head is not None and used_at_head > nonce:
        return Bump.WAIT_RECEIPT
    return Bump.BUMP


# --- 6. who used the nonce ------------------------------------------------------------------
# What the chain proves about a transaction whose nonce the node calls used: a pure rule, no
# I/O (the EVM counterpart of ``venues/solana/fate.py``).
#
# "nonce too low" for our stored bytes, with no receipt for any of ours, is not a conclusion:
# a lagging backend (its index behind its head) answers "not found" for a transaction it has
# mined. The executor therefore reads the facts that decide it, each with the block it was
# answered at: the sender's nonce at the ``latest`` and at the ``finalized`` block, and the
# transaction that actually used the nonce, found in the block where the sender's nonce passed
# it (a binary search over ``eth_getTransactionCount`` at block numbers, then that block's
# body). From those facts:
#
# - the nonce was used by a transaction QTG signed: MINED (wait for its receipt; never drop);
# - the sender's nonce at ``latest`` has not passed ours: RESEND (the node's answer was wrong
#   or behind; the stored bytes again);
# - the transaction that used it is not found, or its block is not final yet (the sender's
#   nonce at the finalized block has not passed ours): WAIT (a reorg may still bring ours in);
# - used by another transaction at finality, first seen now: NOTE (recorded, asked again);
# - the same, first seen at least ``window`` ago -- and at least the chain's
#   ``post_final_watch`` ago, the time a finalized fact is still distrusted -- with no other
#   endpoint of the chain contradicting it (a receipt or the body of one of ours, another user
#   of the nonce): DROP. No block may include ours any more.
#
# A receipt of one of ours at any endpoint is MINED whatever else was answered: a transaction
# with a receipt somewhere is never concluded absent (``receipt_anywhere``).


class Verdict(StrEnum):
    RESEND = "resend"
    MINED = "mined"
    WAIT = "wait"
    NOTE = "note"
    DROP = "drop"


@dataclass(frozen=True)
class NonceFacts:
    nonce: int  # the transaction's
    nonce_latest: int  # the sender's transaction count at the head it was answered at
    nonce_finalized: int  # ... at the finalized block
    spent_by: str | None  # the hash of the transaction found using the nonce
    ours: bool  # spent_by is a transaction QTG signed
    spent_block: int | None  # the block it is in
    finalized_block: int
    noted_at: datetime | None  # an earlier look found the same proof at finality
    now: datetime
    window_seconds: float
    watch_seconds: float = 0.0  # the chain's post_final_watch
    receipt_anywhere: bool = False  # an endpoint served a receipt of one of ours
    contradicted: bool = False  # another endpoint saw ours, or another user of the nonce


def verdict(facts: NonceFacts) -> Verdict:
    if facts.ours or facts.receipt_anywhere:
        return Verdict.MINED
    if facts.nonce_latest <= facts.nonce:
        return Verdict.RESEND
    if (
        facts.spent_by is None
        or facts.spent_block is None
        or facts.nonce_finalized <= facts.nonce
        or facts.spent_block > facts.finalized_block
    ):
        return Verdict.WAIT
    if facts.noted_at is None:
        return Verdict.NOTE
    waited = (facts.now - facts.noted_at).total_seconds()
    if facts.contradicted or waited < max(facts.window_seconds, facts.watch_seconds):
        return Verdict.WAIT
    return Verdict.DROP


def recovered(*, signed: bool, observed: str, track_status: str, mined: bool, refused: bool) -> str:
    """What recovery concludes about an UNKNOWN node's transactions after one look (``track``),
    for every executor that sends EVM transactions (the transfer, CCTP's burn and mint): the
    one rule, so they cannot disagree. Returns a ``RecoveredOutcome`` value.

    - nothing signed: FAILED (nothing can have left);
    - the look settled it (final, or mined and reverted): what it observed;
    - DROPPED (its nonce used by a transaction QTG did not sign, at finality, past the watch,
      no endpoint contradicting): FAILED, it can never be mined;
    - the network has it (mined, in the mempool, or just handed the stored bytes): SUBMITTED;
    - otherwise (the node refuses the bytes, nothing seen): UNRESOLVED, asked again."""
    if not signed:
        return "FAILED"
    if observed in ("COMPLETED", "FAILED"):
        return observed
    if track_status == "dropped":
        return "FAILED"
    if track_status == "waiting" and (mined or not refused):
        return "SUBMITTED"
    return "UNRESOLVED"

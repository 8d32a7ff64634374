"""Chain transactions: the transaction-level state machine below a node (the custody article).

Each broadcast a node makes on a chain is one ``ChainTransaction`` with its own state, changed
only by ``venues.transactions`` (which validates the edge against ``TX_TRANSITIONS`` and writes
a ``ChainTransactionEvent`` in the same database transaction). The signed bytes are stored
before they are broadcast, so any retry or recovery re-sends exactly them. A fee-bump
replacement is a new row with the same nonce and ``replaces`` pointing at the one it
competes with. A nonce a node left unused (signed, never broadcast, the node ended) is filled
by a zero-value self-transfer, ``purpose`` NONCE_FILL, ``replaces`` pointing at the orphan.
Shared by every chain adapter (EVM, CCTP on EVM, Solana: no nonce there).
"""

from collections.abc import Mapping

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.utils import timezone

from movements.public import MovementRequest, MovementRequestNode
from qtg.core.chain import linked_constraint
from qtg.core.models import AppendOnlyModel, AuditEventModel
from qtg.core.money import MONEY
from venues.cex.models import (  # noqa: F401
    CexClock,
    CexDepositClaim,
    CexRateBucket,
    CexWithdrawal,
)  # (the exchange adapter's)


class TxState(models.TextChoices):
    CREATED = "CREATED"  # built, nonce allocated, not signed yet
    SIGNED = "SIGNED"  # raw signed bytes and hash stored, never handed to a node yet
    BROADCAST = "BROADCAST"  # handed to an RPC node; the network may not know it yet
    PENDING = "PENDING"  # the network knows it (mempool), not in a block
    CONFIRMED = "CONFIRMED"  # in a canonical block, not final yet
    FINALIZED = "FINALIZED"  # final by the chain's policy
    FAILED = "FAILED"  # never signed/broadcastable, or mined and reverted (final)
    # The provisional exits (REPLACED, DROPPED): each walks back (to PENDING/CONFIRMED, with
    # evidence) if the chain contradicts it later, e.g. an original mined after a reorg took
    # its bump away.
    REPLACED = "REPLACED"  # another transaction with its nonce won (never a failure)
    DROPPED = "DROPPED"  # its nonce was used by a transaction that is not ours (at finality)
    EXPIRED = "EXPIRED"  # Solana: its blockhash expired before it landed (final)


class TxPurpose(models.TextChoices):
    NODE = "node"  # signed for a node attempt (its transfer, or a fee bump of it)
    NONCE_FILL = "nonce_fill"  # a zero-value self-transfer using up an orphaned nonce


S = TxState

# The transaction table. Backwards edges: CONFIRMED -> PENDING (a reorg took the block
# away); REPLACED/DROPPED -> CONFIRMED/PENDING (a later sighting: the transaction is mined or
# in the mempool after all; its receipt decides the winner of a fee-bump pair, not which was
# seen first). PENDING -> BROADCAST is a re-broadcast of the stored bytes of a transaction
# that left the mempool. FINALIZED -> PENDING is the one exit of a final state: a finalized
# transaction the post-final watcher no longer finds in the canonical chain (a reorg deeper
# than the reviewed policy trusted: ``final_reorg``); its ledger entry is compensated, never
# erased (``ChainLedgerEntry``). FAILED and EXPIRED have no exit (Solana's EXPIRED is
# concluded only on a status answer covering the decisive slot: ``venues.solana.fate``).
TX_TRANSITIONS: Mapping[TxState, frozenset[TxState]] = {
    S.CREATED: frozenset({S.SIGNED, S.FAILED, S.REPLACED}),
    S.SIGNED: frozenset(
        {S.BROADCAST, S.PENDING, S.CONFIRMED, S.FAILED, S.REPLACED, S.DROPPED, S.EXPIRED}
    ),
    S.BROADCAST: frozenset({S.PENDING, S.CONFIRMED, S.FAILED, S.REPLACED, S.DROPPED, S.EXPIRED}),
    S.PENDING: frozenset({S.BROADCAST, S.CONFIRMED, S.REPLACED, S.DROPPED, S.EXPIRED}),
    S.CONFIRMED: frozenset({S.FINALIZED, S.FAILED, S.PENDING}),
    S.FINALIZED: frozenset({S.PENDING}),
    S.FAILED: frozenset(),
    S.REPLACED: frozenset({S.CONFIRMED, S.PENDING}),
    S.DROPPED: frozenset({S.CONFIRMED, S.PENDING}),
    S.EXPIRED: frozenset(),
}

# Final by the chain's facts: nothing QTG does moves them on (FINALIZED leaves only when the
# chain itself contradicts its finality, see above).
FINAL_TX_STATES = frozenset({S.FINALIZED, S.FAILED, S.EXPIRED})
# Ended for QTG's own actions (nothing re-sends or bumps them), though the provisional ones
# walk back on a later sighting.
PROVISIONAL_TX_STATES = frozenset({S.REPLACED, S.DROPPED})
TERMINAL_TX_STATES = FINAL_TX_STATES | PROVISIONAL_TX_STATES
# Signed and possibly known to the network: what the stuck detector and observers watch.
LIVE_TX_STATES = frozenset({S.SIGNED, S.BROADCAST, S.PENDING, S.CONFIRMED})


def can_transition_tx_state(current: str, new: str) -> bool:
    return TxState(new) in TX_TRANSITIONS.get(TxState(current), frozenset())


# Wei amounts exceed 64-bit integers: stored as whole-number decimals.
UINT256 = {"max_digits": 78, "decimal_places": 0}


class ChainTransaction(models.Model):
    """One transaction a node signed for a chain, and where it stands."""

    chain = models.CharField(max_length=64)
    sender = models.CharField(max_length=128)
    # The sender's account sequence where the family has one (EVM's nonce; Cosmos would put
    # its sequence here): shared, because the nonce allocator and the gap filler query and
    # order by it. None on Solana.
    nonce = models.PositiveBigIntegerField(null=True, blank=True)
    # Why QTG signed it: a node's transaction, or a filler of a nonce a node left unused
    # (``replaces`` then points at the orphan it stands in for; ``venues.evm.tx.gaps``).
    purpose = models.CharField(max_length=16, choices=TxPurpose.choices, default=TxPurpose.NODE)
    state = models.CharField(max_length=16, choices=TxState.choices, default=TxState.CREATED)
    # The transaction as signed (to, value, data, gas, fees, ...), JSON-safe.
    unsigned = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    tx_hash = models.CharField(max_length=128, blank=True)  # EVM hash / Solana signature
    raw_signed = models.TextField(blank=True)  # 0x-hex (EVM) or base64 (Solana), pre-broadcast
    # The chain family (``qtg.core.chains``: evm, solana) and its own fields, checked against
    # the family's schema by the one writer (``venues.transactions``): EVM's gas limit and
    # EIP-1559 fees, Solana's blockhash and last valid height. Whole numbers are decimal
    # strings (wei exceed every JSON number type). README "Architecture" says why not columns.
    family = models.CharField(max_length=16, blank=True)
    family_detail = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    fee_paid = models.DecimalField(null=True, blank=True, **UINT256)  # smallest native unit
    movement = models.ForeignKey(
        MovementRequest,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="chain_transactions",
    )
    node = models.ForeignKey(
        MovementRequestNode,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="chain_transactions",
    )
    replaces = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="replacements"
    )
    block_number = models.PositiveBigIntegerField(null=True, blank=True)
    block_hash = models.CharField(max_length=128, blank=True)
    confirmations = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    signed_at = models.DateTimeField(null=True, blank=True)
    broadcast_at = models.DateTimeField(null=True, blank=True)  # last (re-)broadcast
    pending_at = models.DateTimeField(null=True, blank=True)  # first seen by the network
    confirmed_at = models.DateTimeField(null=True, blank=True)  # latest inclusion seen
    finalized_at = models.DateTimeField(null=True, blank=True)
    state_changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["chain", "sender", "nonce", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["chain", "tx_hash"], condition=~Q(tx_hash=""), name="chain_tx_hash_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["chain", "sender", "nonce"]),
            models.Index(fields=["state"]),
        ]

    def __str__(self) -> str:
        nonce = f" #{self.nonce}" if self.nonce is not None else ""
        return f"{self.chain}{nonce} {self.tx_hash or '(unsigned)'} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_TX_STATES


class ChainTransactionEvent(AuditEventModel):
    """One audit record of a chain transaction: its transition and the evidence for it (the
    node's answer, the block hash), or evidence recorded without a state change
    (``from_state == to_state``: a re-broadcast)."""

    chain_transaction = models.ForeignKey(
        ChainTransaction, on_delete=models.PROTECT, related_name="events"
    )
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    evidence = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    chain_stream = "chain_transaction_id"
    chain_subject_has_rows = True  # created with its CREATED event
    chain_time = "at"

    class Meta:
        ordering = ["at", "id"]
        constraints = [linked_constraint("chaintransactionevent")]

    def __str__(self) -> str:
        return f"{self.from_state or '-'} -> {self.to_state}"


class LedgerKind(models.TextChoices):
    FINAL = "final", "Final on the chain"
    REVERSAL = "reversal", "Reversed: the final transaction left the chain"


class ChainLedgerEntry(AppendOnlyModel):
    """The append-only ledger of what a node's chain transactions moved at finality: one
    FINAL entry (+amount) when a transaction of a node becomes FINALIZED, and, when a
    finalized transaction leaves the canonical chain (a final reorg), a REVERSAL entry
    (-amount) pointing at the entry it compensates. Nothing is ever changed or deleted: the
    sum of a transaction's entries is what the chain holds now (the custody article's
    "reversed with a compensating entry")."""

    chain = models.CharField(max_length=64)
    chain_transaction = models.ForeignKey(
        ChainTransaction, on_delete=models.PROTECT, related_name="ledger_entries"
    )
    movement = models.ForeignKey(
        MovementRequest, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    node = models.ForeignKey(
        MovementRequestNode, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    kind = models.CharField(max_length=16, choices=LedgerKind.choices)
    asset = models.CharField(max_length=32, blank=True)
    amount = models.DecimalField(**MONEY)  # signed: negative for a reversal
    compensates = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="compensated_by"
    )
    evidence = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    chain_stream = "chain_transaction_id"
    chain_time = "at"

    class Meta:
        ordering = ["at", "id"]
        verbose_name_plural = "chain ledger entries"
        constraints = [linked_constraint("chainledgerentry")]

    def __str__(self) -> str:
        return f"{self.kind} {self.amount} {self.asset} ({self.chain_transaction_id})"


class NonceCursor(models.Model):
    """The next nonce QTG hands out for one sender on one chain (``venues.nonces``)."""

    chain = models.CharField(max_length=64)
    sender = models.CharField(max_length=128)
    next_nonce = models.PositiveBigIntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain", "sender"], name="one_nonce_cursor_per_sender")
        ]

    def __str__(self) -> str:
        return f"{self.chain} {self.sender}: next {self.next_nonce}"

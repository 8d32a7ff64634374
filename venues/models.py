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

from movements.interface import MovementRequest, MovementRequestNode
from qtg.core.actors import ActorType
from qtg.core.models import AppendOnlyModel
from venues.cex.models import CexRateBucket, CexWithdrawal  # noqa: F401 (the exchange adapter's)


class TxState(models.TextChoices):
    CREATED = "CREATED"  # built, nonce allocated, not signed yet
    SIGNED = "SIGNED"  # raw signed bytes and hash stored, never handed to a node yet
    BROADCAST = "BROADCAST"  # handed to an RPC node; the network may not know it yet
    PENDING = "PENDING"  # the network knows it (mempool), not in a block
    CONFIRMED = "CONFIRMED"  # in a canonical block, not final yet
    FINALIZED = "FINALIZED"  # final by the chain's policy
    FAILED = "FAILED"  # never signed/broadcastable, or mined and reverted (final)
    REPLACED = "REPLACED"  # another transaction with its nonce won (never a failure)
    DROPPED = "DROPPED"  # its nonce was used by a transaction that is not ours
    EXPIRED = "EXPIRED"  # Solana: its blockhash expired before it landed


class TxPurpose(models.TextChoices):
    NODE = "node"  # signed for a node attempt (its transfer, or a fee bump of it)
    NONCE_FILL = "nonce_fill"  # a zero-value self-transfer using up an orphaned nonce


S = TxState

# The transaction table. CONFIRMED -> PENDING is the one backwards edge: a reorg took the
# block away. PENDING -> BROADCAST is a re-broadcast of the stored bytes of a transaction
# that left the mempool.
TX_TRANSITIONS: Mapping[TxState, frozenset[TxState]] = {
    S.CREATED: frozenset({S.SIGNED, S.FAILED, S.REPLACED}),
    S.SIGNED: frozenset(
        {S.BROADCAST, S.PENDING, S.CONFIRMED, S.FAILED, S.REPLACED, S.DROPPED, S.EXPIRED}
    ),
    S.BROADCAST: frozenset({S.PENDING, S.CONFIRMED, S.FAILED, S.REPLACED, S.DROPPED, S.EXPIRED}),
    S.PENDING: frozenset({S.BROADCAST, S.CONFIRMED, S.REPLACED, S.DROPPED, S.EXPIRED}),
    S.CONFIRMED: frozenset({S.FINALIZED, S.FAILED, S.PENDING}),
    S.FINALIZED: frozenset(),
    S.FAILED: frozenset(),
    S.REPLACED: frozenset(),
    S.DROPPED: frozenset(),
    S.EXPIRED: frozenset(),
}

TERMINAL_TX_STATES = frozenset(state for state, targets in TX_TRANSITIONS.items() if not targets)
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
    nonce = models.PositiveBigIntegerField(null=True, blank=True)  # none on Solana
    # Why QTG signed it: a node's transaction, or a filler of a nonce a node left unused
    # (``replaces`` then points at the orphan it stands in for; ``venues.evm.gaps``).
    purpose = models.CharField(max_length=16, choices=TxPurpose.choices, default=TxPurpose.NODE)
    state = models.CharField(max_length=16, choices=TxState.choices, default=TxState.CREATED)
    # The transaction as signed (to, value, data, gas, fees, ...), JSON-safe.
    unsigned = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    tx_hash = models.CharField(max_length=128, blank=True)  # EVM hash / Solana signature
    raw_signed = models.TextField(blank=True)  # 0x-hex (EVM) or base64 (Solana), pre-broadcast
    gas_limit = models.PositiveBigIntegerField(null=True, blank=True)
    max_fee_per_gas = models.DecimalField(null=True, blank=True, **UINT256)
    max_priority_fee_per_gas = models.DecimalField(null=True, blank=True, **UINT256)
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


class ChainTransactionEvent(AppendOnlyModel):
    """One audit record of a chain transaction: its transition and the evidence for it (the
    node's answer, the block hash), or evidence recorded without a state change
    (``from_state == to_state``: a re-broadcast)."""

    chain_transaction = models.ForeignKey(
        ChainTransaction, on_delete=models.PROTECT, related_name="events"
    )
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    evidence = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    actor_id = models.CharField(max_length=128, blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.from_state or '-'} -> {self.to_state}"


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

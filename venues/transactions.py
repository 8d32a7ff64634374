"""The one writer of chain-transaction state: every change is an edge of ``TX_TRANSITIONS``,
made under the row's lock, with its ``ChainTransactionEvent`` (the evidence) written in the
same database transaction. An illegal edge raises ``IllegalStateTransition`` and writes
nothing. Adapters (EVM, CCTP, Solana) call these services; none writes ``state`` itself."""

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from qtg.core.actors import Actor, acting
from qtg.core.chains import family as chain_family
from qtg.core.errors import IllegalStateTransition, StaleState
from venues.models import (
    ChainLedgerEntry,
    ChainTransaction,
    ChainTransactionEvent,
    LedgerKind,
    TxPurpose,
    TxState,
    can_transition_tx_state,
)

S = TxState

# What a transition may set besides the state. ``raw_signed`` and ``tx_hash`` are written
# once (when signed): a transaction is never re-signed.
WRITABLE = frozenset(
    {
        "tx_hash",
        "raw_signed",
        "block_number",
        "block_hash",
        "confirmations",
        "fee_paid",
        "broadcast_at",
    }
)
WRITE_ONCE = frozenset({"tx_hash", "raw_signed"})

# The timestamp each state stamps when entered (``pending_at``: the first time only).
STAMPS = {
    S.SIGNED: "signed_at",
    S.BROADCAST: "broadcast_at",
    S.PENDING: "pending_at",
    S.CONFIRMED: "confirmed_at",
    S.FINALIZED: "finalized_at",
}


def chain_transaction_create(
    *,
    chain: str,
    sender: str,
    nonce: int | None,
    unsigned: Mapping[str, Any],
    actor: Actor,
    movement_id: Any = None,
    node_id: int | None = None,
    replaces: ChainTransaction | None = None,
    purpose: str = TxPurpose.NODE,
    family: str,
    detail: Mapping[str, Any] | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> ChainTransaction:
    """A new CREATED transaction (its nonce already allocated, see ``venues.nonces``) with
    its first event; ``detail``, the family's own fields, is checked against the family's
    schema (``qtg.core.chains``: unknown fields and wrong types are refused)."""
    family_detail = chain_family(family).tx_detail_json(detail or {})
    with transaction.atomic():
        tx = ChainTransaction.objects.create(
            chain=chain,
            sender=sender,
            nonce=nonce,
            unsigned=dict(unsigned),
            movement_id=movement_id,
            node_id=node_id,
            replaces=replaces,
            purpose=TxPurpose(purpose),
            family=family,
            family_detail=family_detail,
        )
        _event(tx, "", S.CREATED, actor=actor, evidence=evidence)
    return tx


def chain_transaction_transition(
    *,
    chain_transaction_id: int,
    to_state: str,
    actor: Actor,
    evidence: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    expected: Iterable[str] | None = None,
) -> ChainTransaction:
    """Move a transaction to ``to_state`` (an edge of the table) with ``fields`` set and the
    evidence recorded. ``expected``: the states the caller read it in; if another process
    moved it meanwhile, ``StaleState`` (nothing written)."""
    target = TxState(to_state)
    with transaction.atomic():
        tx = ChainTransaction.objects.select_for_update().get(pk=chain_transaction_id)
        if expected is not None and tx.state not in set(expected):
            raise StaleState(
                f"chain transaction {tx.pk} is {tx.state}, not {', '.join(sorted(expected))}"
            )
        if not can_transition_tx_state(tx.state, target):
            raise IllegalStateTransition(
                subject=f"chain transaction {tx.pk}", current=tx.state, target=target
            )
        old = tx.state
        now = timezone.now()
        update = _set_fields(tx, fields or {})
        tx.state = target
        tx.state_changed_at = now
        update |= {"state", "state_changed_at"}
        stamp = STAMPS.get(target)
        if stamp and not (stamp == "pending_at" and tx.pending_at) and stamp not in (fields or {}):
            setattr(tx, stamp, now)
            update.add(stamp)
        tx.save(update_fields=sorted(update))
        _event(tx, old, target, actor=actor, evidence=evidence, at=now)
        if S.FINALIZED in (old, target):
            _ledger(tx, entering=target == S.FINALIZED, evidence=evidence, at=now)
    return tx


def chain_transaction_record(
    *,
    chain_transaction_id: int,
    actor: Actor,
    evidence: Mapping[str, Any],
    fields: Mapping[str, Any] | None = None,
) -> ChainTransaction:
    """Evidence without a state change (a re-broadcast of the stored bytes, a new count of
    confirmations worth keeping), with ``fields`` set in the same transaction."""
    with transaction.atomic():
        tx = ChainTransaction.objects.select_for_update().get(pk=chain_transaction_id)
        update = _set_fields(tx, fields or {})
        if update:
            tx.save(update_fields=sorted(update))
        _event(tx, tx.state, tx.state, actor=actor, evidence=evidence)
    return tx


def chain_transaction_count_confirmations(*, chain_transaction_id: int, confirmations: int) -> None:
    """The confirmations seen at the latest look (bookkeeping, no event: every poll moves it;
    the transitions around it carry the evidence)."""
    ChainTransaction.objects.filter(pk=chain_transaction_id).exclude(
        confirmations=confirmations
    ).update(confirmations=confirmations)


def _ledger(
    tx: ChainTransaction, *, entering: bool, evidence: Mapping[str, Any] | None, at: Any
) -> None:
    """The ledger follows a node's transaction into and out of FINALIZED: +amount when it
    becomes final, a compensating -amount entry when a final reorg takes it away (the entry
    it compensates is never touched). Transactions of no node (nonce fills, a sender's
    allowance) move nothing of a movement's."""
    if tx.node_id is None or tx.movement_id is None:
        return
    if entering:
        movement = tx.movement
        ChainLedgerEntry.objects.create(
            chain=tx.chain,
            chain_transaction=tx,
            movement_id=tx.movement_id,
            node_id=tx.node_id,
            kind=LedgerKind.FINAL,
            asset=movement.asset,
            amount=movement.amount,
            evidence=dict(evidence or {}),
            at=at,
        )
        return
    final = (
        ChainLedgerEntry.objects.filter(
            chain_transaction=tx, kind=LedgerKind.FINAL, compensated_by__isnull=True
        )
        .order_by("-id")
        .first()
    )
    if final is None:
        return
    ChainLedgerEntry.objects.create(
        chain=tx.chain,
        chain_transaction=tx,
        movement_id=final.movement_id,
        node_id=final.node_id,
        kind=LedgerKind.REVERSAL,
        asset=final.asset,
        amount=-final.amount,
        compensates=final,
        evidence=dict(evidence or {}),
        at=at,
    )


def _set_fields(tx: ChainTransaction, fields: Mapping[str, Any]) -> set[str]:
    unknown = set(fields) - WRITABLE
    if unknown:
        raise ValueError(f"chain transaction fields not writable here: {sorted(unknown)}")
    for name in WRITE_ONCE & set(fields):
        current = getattr(tx, name)
        if current and current != fields[name]:
            raise ValueError(f"chain transaction {tx.pk}: {name} is written once (never re-signed)")
    for name, value in fields.items():
        setattr(tx, name, value)
    return set(fields)


def _event(
    tx: ChainTransaction,
    old: str,
    new: str,
    *,
    actor: Actor,
    evidence: Mapping[str, Any] | None,
    at: Any = None,
) -> ChainTransactionEvent:
    actor = acting(actor)
    return ChainTransactionEvent.objects.create(
        chain_transaction=tx,
        from_state=old,
        to_state=new,
        evidence=dict(evidence or {}),
        actor_type=actor.type,
        actor_id=actor.id,
        at=at or timezone.now(),
    )

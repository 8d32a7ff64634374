"""The one writer of chain-transaction state: every change is an edge of ``TX_TRANSITIONS``,
made under the row's lock, with its ``ChainTransactionEvent`` (the evidence) written in the
same database transaction. An illegal edge raises ``IllegalStateTransition`` and writes
nothing. Adapters (EVM, CCTP, Solana) call these services; none writes ``state`` itself."""

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from movements.public import MovementRequest
from qtg.core.actors import Actor, acting
from qtg.core.chain import GENESIS, heads_known
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
    schema (``qtg.core.chains``: unknown fields and wrong types are refused). Inside the
    caller's database transaction it is part of that unit (no savepoint of its own)."""
    family_detail = chain_family(family).tx_detail_json(detail or {})
    with transaction.atomic(savepoint=False):
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
        # A row this statement just made has no events yet: its stream starts at the genesis.
        with heads_known({ChainTransactionEvent: {tx.pk: GENESIS}}):
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
    moved it meanwhile, ``StaleState`` (nothing written).

    Inside the caller's database transaction it is part of that unit (no savepoint of its
    own). A refusal (stale, an illegal edge, a field written once) is raised after nothing
    was written, outside the block, so a caller's transaction that catches it goes on. With
    one expected state the change is one compare-and-set (``_compare_and_set``: the row's
    lock, the edge's check and the write in one statement); without it the row is locked and
    read first, and the edge is checked on what was read."""
    target = TxState(to_state)
    fields = dict(fields or {})
    _check_writable(fields)
    states = None if expected is None else {TxState(state) for state in expected}
    tx: ChainTransaction | None = None
    refused: Exception | None = None
    with transaction.atomic(savepoint=False):
        if states is not None and len(states) == 1:
            [old] = states
            if can_transition_tx_state(old, target):
                tx = _compare_and_set(chain_transaction_id, old, target, fields)
            if tx is None:
                # Nothing was written: why not, read now (the caller is told what it is).
                found = _current(chain_transaction_id)
                refused = _refusal(chain_transaction_id, found, target, fields, states)
                refused = refused or StaleState(
                    f"chain transaction {chain_transaction_id} changed meanwhile"
                )
        else:
            found = _current(chain_transaction_id, lock=True)
            refused = _refusal(chain_transaction_id, found, target, fields, states)
            if refused is None:
                old = TxState(found[0])
                tx = _compare_and_set(chain_transaction_id, old, target, fields)
        if tx is not None:
            at = tx.state_changed_at
            _event(tx, old, target, actor=actor, evidence=evidence, at=at)
            if S.FINALIZED in (old, target):
                _ledger(tx, entering=target == S.FINALIZED, evidence=evidence, at=at)
    if refused is not None:
        raise refused
    assert tx is not None
    return tx


def chain_transaction_record(
    *,
    chain_transaction_id: int,
    actor: Actor,
    evidence: Mapping[str, Any],
    fields: Mapping[str, Any] | None = None,
) -> ChainTransaction:
    """Evidence without a state change (a re-broadcast of the stored bytes, a new count of
    confirmations worth keeping), with ``fields`` set in the same transaction (the caller's,
    if one is open: no savepoint of its own; a field written once is refused before
    anything is written)."""
    fields = dict(fields or {})
    _check_writable(fields)
    refused: Exception | None = None
    with transaction.atomic(savepoint=False):
        tx = ChainTransaction.objects.select_for_update().get(pk=chain_transaction_id)
        refused = _written_once(tx.pk, {name: getattr(tx, name) for name in WRITE_ONCE}, fields)
        if refused is None:
            for name, value in fields.items():
                setattr(tx, name, value)
            if fields:
                tx.save(update_fields=sorted(fields))
            _event(tx, tx.state, tx.state, actor=actor, evidence=evidence)
    if refused is not None:
        raise refused
    return tx


def chain_transaction_count_confirmations(*, chain_transaction_id: int, confirmations: int) -> None:
    """The confirmations seen at the latest look (bookkeeping, no event: every poll moves it;
    the transitions around it carry the evidence)."""
    ChainTransaction.objects.filter(pk=chain_transaction_id).exclude(
        confirmations=confirmations
    ).update(confirmations=confirmations)


# The ledger's own columns a transition into FINALIZED reads with its compare-and-set (the
# movement's asset and amount, the newest link of the transaction's ledger stream), so the
# ledger entry costs its INSERT alone.
_LEDGER_ASSET, _LEDGER_AMOUNT, _LEDGER_HEAD = "ledger_asset", "ledger_amount", "ledger_head"


def _compare_and_set(
    pk: int, old: TxState, target: TxState, fields: Mapping[str, Any]
) -> ChainTransaction | None:
    """One statement: the row moves ``old`` -> ``target`` with ``fields`` and the state's
    stamp set, only if it is still ``old`` and no field written once would change; the row
    as written comes back (None: nothing was written). On PostgreSQL the UPDATE takes the
    row's lock and re-checks its condition on the newest version, so it is the lock, the
    check and the save of the locked read in one round trip."""
    meta = ChainTransaction._meta
    quote = connection.ops.quote_name
    now = timezone.now()
    assignments: list[str] = []
    params: list[Any] = []

    def assign(name: str, value: Any, template: str = "%s") -> None:
        field = meta.get_field(name)
        assignments.append(f"{quote(field.column)} = {template}")
        params.append(field.get_db_prep_save(value, connection))

    assign("state", str(target))
    assign("state_changed_at", now)
    stamp = STAMPS.get(target)
    if stamp and stamp not in fields:
        if stamp == "pending_at":  # the first time only
            assign(stamp, now, f"COALESCE({quote(stamp)}, %s)")
        else:
            assign(stamp, now)
    for name, value in fields.items():
        assign(name, value)
    where = [f"{quote(meta.pk.column)} = %s", f"{quote('state')} = %s"]
    params += [pk, str(old)]
    for name in sorted(WRITE_ONCE & set(fields)):
        # Written once: empty until then, and never to another value.
        column = quote(meta.get_field(name).column)
        where.append(f"({column} = '' OR {column} = %s)")
        params.append(fields[name])
    columns = list(meta.concrete_fields)
    returning = [f"{quote(meta.db_table)}.{quote(field.column)}" for field in columns]
    extra: list[tuple[str, Any]] = []
    if target == S.FINALIZED:
        movement = MovementRequest._meta
        for name, column in ((_LEDGER_ASSET, "asset"), (_LEDGER_AMOUNT, "amount")):
            returning.append(
                f"(SELECT m.{quote(movement.get_field(column).column)} FROM "
                f"{quote(movement.db_table)} m WHERE m.{quote(movement.pk.column)} = "
                f"{quote(meta.db_table)}.{quote(meta.get_field('movement').column)})"
            )
            extra.append((name, movement.get_field(column)))
        # Entries of a transaction's ledger stream are written only by transitions into and
        # out of FINALIZED, each a change of this row's state: no entry can have been added
        # since the state this compare-and-set found, so the stream's head read with it is
        # the head the new entry links after.
        ledger = ChainLedgerEntry._meta
        stream = quote(ledger.get_field("chain_transaction").column)
        returning.append(
            f"(SELECT l.{quote('chain_hash')} FROM {quote(ledger.db_table)} l WHERE "
            f"l.{stream} = {quote(meta.db_table)}.{quote(meta.pk.column)} "
            f"ORDER BY l.{quote(ledger.pk.column)} DESC LIMIT 1)"
        )
        extra.append((_LEDGER_HEAD, None))
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} "
        f"WHERE {' AND '.join(where)} RETURNING {', '.join(returning)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    values = [_from_db(field, value) for field, value in zip(columns, row, strict=False)]
    tx = ChainTransaction.from_db(connection.alias, [field.attname for field in columns], values)
    for (name, field), value in zip(extra, row[len(columns) :], strict=True):
        setattr(tx, name, _from_db(field, value) if field is not None else value)
    return tx


def _from_db(field: Any, value: Any) -> Any:
    """``value`` as the ORM would have read it from ``field``'s column."""
    column = field.get_col(field.model._meta.db_table)
    for convert in connection.ops.get_db_converters(column) + column.get_db_converters(connection):
        value = convert(value, column, connection)
    return value


def _current(pk: int, *, lock: bool = False) -> tuple | None:
    """The row's state and its fields written once (locked with ``lock``); None if none."""
    rows = ChainTransaction.objects.filter(pk=pk)
    if lock:
        rows = rows.select_for_update()
    return rows.values_list("state", *sorted(WRITE_ONCE)).first()


def _refusal(
    pk: int,
    found: tuple | None,
    target: TxState,
    fields: Mapping[str, Any],
    expected: set[TxState] | None,
) -> Exception | None:
    """Why the move of the row ``found`` (``_current``) to ``target`` is refused, in the order
    a caller is told: gone, moved by someone else (``StaleState``), an illegal edge, a field
    written once. None: it is not."""
    if found is None:
        return ChainTransaction.DoesNotExist(f"chain transaction {pk} does not exist")
    state, *once = found
    if expected is not None and state not in expected:
        return StaleState(f"chain transaction {pk} is {state}, not {', '.join(sorted(expected))}")
    if not can_transition_tx_state(state, target):
        return IllegalStateTransition(
            subject=f"chain transaction {pk}", current=state, target=target
        )
    return _written_once(pk, dict(zip(sorted(WRITE_ONCE), once, strict=True)), fields)


def _ledger(
    tx: ChainTransaction, *, entering: bool, evidence: Mapping[str, Any] | None, at: Any
) -> None:
    """The ledger follows a node's transaction into and out of FINALIZED: +amount when it
    becomes final, a compensating -amount entry when a final reorg takes it away (the entry
    it compensates is never touched). Transactions of no node (nonce fills, a sender's
    allowance) move nothing of a movement's. Entering, the movement's asset and amount and the
    stream's head come with the compare-and-set (``_compare_and_set``)."""
    if tx.node_id is None or tx.movement_id is None:
        return
    if entering:
        entry = ChainLedgerEntry(
            chain=tx.chain,
            chain_transaction=tx,
            movement_id=tx.movement_id,
            node_id=tx.node_id,
            kind=LedgerKind.FINAL,
            asset=getattr(tx, _LEDGER_ASSET),
            amount=getattr(tx, _LEDGER_AMOUNT),
            evidence=dict(evidence or {}),
            at=at,
        )
        with heads_known({ChainLedgerEntry: {tx.pk: getattr(tx, _LEDGER_HEAD) or GENESIS}}):
            entry.save()
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


def _check_writable(fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - WRITABLE
    if unknown:
        raise ValueError(f"chain transaction fields not writable here: {sorted(unknown)}")


def _written_once(
    pk: int, current: Mapping[str, Any], fields: Mapping[str, Any]
) -> ValueError | None:
    for name in sorted(WRITE_ONCE & set(fields)):
        if current[name] and current[name] != fields[name]:
            return ValueError(f"chain transaction {pk}: {name} is written once (never re-signed)")
    return None


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

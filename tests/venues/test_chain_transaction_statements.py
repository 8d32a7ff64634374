"""What a chain-transaction state change costs the database (issue 34), and that the cheaper
write keeps every rule of the one writer: inside the caller's transaction a change is one
compare-and-set, the audit event's chain head and its INSERT (no savepoint, no read of the
row before it); into FINALIZED the ledger entry is one INSERT more (no read of the movement,
no read of the ledger's head). A refusal writes nothing and leaves the caller's transaction
usable."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from qtg.core.chain import GENESIS, link_problem
from qtg.core.errors import IllegalStateTransition, StaleState
from tests.venues.test_chain_transactions import ACTOR, new_tx
from venues.models import ChainLedgerEntry, ChainTransaction, LedgerKind, TxState
from venues.transactions import chain_transaction_transition

pytestmark = pytest.mark.django_db
S = TxState

# A state change inside the caller's transaction: the compare-and-set (UPDATE ... RETURNING),
# the event stream's head, the event's INSERT.
STATEMENTS_PER_TRANSITION = 3
# Into FINALIZED, a node's transaction: its ledger entry's INSERT as well.
STATEMENTS_PER_FINALIZING = 4
# A new transaction inside the caller's transaction: its INSERT and its first event's (a new
# stream starts at the genesis: no head to read).
STATEMENTS_PER_CREATE = 2


def move(tx, state, **kwargs):
    return chain_transaction_transition(
        chain_transaction_id=tx.pk,
        to_state=state,
        actor=ACTOR,
        expected=[tx.state],
        evidence={"to": str(state)},
        **kwargs,
    )


def sent(captured):
    """Every statement sent, savepoints included (none is expected)."""
    return [query["sql"] for query in captured.captured_queries]


def test_a_state_change_inside_the_callers_transaction_is_three_statements_and_no_savepoint():
    tx = move(new_tx(), S.SIGNED, fields={"tx_hash": "0xaa", "raw_signed": "0x01"})

    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        moved = move(tx, S.BROADCAST)

    statements = sent(captured)
    assert len(statements) == STATEMENTS_PER_TRANSITION, "\n".join(statements)
    assert statements[0].startswith('UPDATE "venues_chaintransaction"')
    assert "RETURNING" in statements[0]
    assert not [sql for sql in statements if "SAVEPOINT" in sql]
    # What comes back is the row as written, stamps and all.
    stored = ChainTransaction.objects.get(pk=tx.pk)
    assert (moved.state, moved.tx_hash, moved.raw_signed) == (S.BROADCAST, "0xaa", "0x01")
    assert moved.broadcast_at == stored.broadcast_at == stored.state_changed_at
    assert moved.signed_at == stored.signed_at is not None
    last = stored.events.order_by("-id").first()
    assert (last.from_state, last.to_state, last.at) == (S.SIGNED, S.BROADCAST, moved.broadcast_at)
    assert link_problem(last) is None


def test_finalizing_a_nodes_transaction_writes_its_ledger_entry_with_one_more_statement(
    make_movement,
):
    movement = make_movement(amount="12.5")
    owner = movement.nodes.order_by("id").first()
    tx = new_tx(movement_id=movement.pk, node_id=owner.pk)
    for state in (S.SIGNED, S.BROADCAST, S.CONFIRMED):
        tx = move(tx, state)

    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        tx = move(tx, S.FINALIZED, fields={"confirmations": 3})

    statements = sent(captured)
    assert len(statements) == STATEMENTS_PER_FINALIZING, "\n".join(statements)
    assert not [sql for sql in statements if 'FROM "movements_movementrequest"' in sql[:80]]
    [entry] = ChainLedgerEntry.objects.all()
    assert (entry.kind, entry.asset, entry.amount) == (LedgerKind.FINAL, "USDC", movement.amount)
    assert (entry.chain_prev, link_problem(entry)) == (GENESIS, None)
    assert tx.confirmations == 3 and tx.finalized_at == entry.at


def test_final_again_after_a_final_reorg_links_its_ledger_entry_after_the_reversal(make_movement):
    movement = make_movement(amount="4")
    owner = movement.nodes.order_by("id").first()
    tx = new_tx(movement_id=movement.pk, node_id=owner.pk)
    for state in (S.SIGNED, S.CONFIRMED, S.FINALIZED, S.PENDING, S.CONFIRMED, S.FINALIZED):
        tx = move(tx, state)

    final, reversal, again = ChainLedgerEntry.objects.order_by("id")
    assert [e.kind for e in (final, reversal, again)] == ["final", "reversal", "final"]
    assert reversal.chain_prev == final.chain_hash
    assert again.chain_prev == reversal.chain_hash
    assert all(link_problem(entry) is None for entry in (final, reversal, again))
    assert again.amount == movement.amount


def test_a_new_transaction_inside_the_callers_transaction_is_two_statements():
    with transaction.atomic(), CaptureQueriesContext(connection) as captured:
        tx = new_tx()

    statements = sent(captured)
    assert len(statements) == STATEMENTS_PER_CREATE, "\n".join(statements)
    [created] = tx.events.all()
    assert (created.chain_prev, link_problem(created)) == (GENESIS, None)


@pytest.mark.parametrize(
    ("expected", "target", "error"),
    [
        ([S.CREATED], S.BROADCAST, StaleState),  # someone signed it meanwhile
        ([S.SIGNED], S.FINALIZED, IllegalStateTransition),  # not an edge of the table
        ([S.SIGNED], S.SIGNED, IllegalStateTransition),
        (None, S.CREATED, IllegalStateTransition),  # the locked read path
    ],
)
def test_a_refused_change_writes_nothing_and_the_callers_transaction_goes_on(
    expected, target, error
):
    tx = move(new_tx(), S.SIGNED, fields={"tx_hash": "0xaa", "raw_signed": "0x01"})

    with transaction.atomic():
        with pytest.raises(error):
            chain_transaction_transition(
                chain_transaction_id=tx.pk, to_state=target, actor=ACTOR, expected=expected
            )
        # The caller's transaction is still usable: its next write goes through.
        moved = move(tx, S.BROADCAST)

    assert moved.state == S.BROADCAST
    assert list(tx.events.values_list("to_state", flat=True).order_by("id")) == [
        "CREATED",
        "SIGNED",
        "BROADCAST",
    ]


def test_a_signed_hash_is_never_overwritten_by_a_transition():
    tx = move(new_tx(), S.SIGNED, fields={"tx_hash": "0xaa", "raw_signed": "0x01"})

    with pytest.raises(ValueError, match="written once"):
        move(tx, S.BROADCAST, fields={"tx_hash": "0xbb"})

    stored = ChainTransaction.objects.get(pk=tx.pk)
    assert (stored.state, stored.tx_hash) == (S.SIGNED, "0xaa")
    assert stored.events.count() == 2
    # The same value again is no change: allowed.
    assert move(stored, S.BROADCAST, fields={"tx_hash": "0xaa"}).state == S.BROADCAST


def test_pending_is_stamped_the_first_time_only():
    tx = new_tx()
    for state in (S.SIGNED, S.BROADCAST, S.PENDING):
        tx = move(tx, state)
    first = tx.pending_at

    for state in (S.BROADCAST, S.PENDING):
        tx = move(tx, state)

    assert tx.pending_at == first == ChainTransaction.objects.get(pk=tx.pk).pending_at
    assert tx.broadcast_at > first


def test_a_missing_transaction_is_not_found():
    with pytest.raises(ChainTransaction.DoesNotExist):
        chain_transaction_transition(
            chain_transaction_id=10**9, to_state=S.SIGNED, actor=ACTOR, expected=[S.CREATED]
        )

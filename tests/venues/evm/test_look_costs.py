"""What one observe look at an EVM transfer costs the database (issue 34): the node's
transactions and its sender's nonce-gap hint in one statement, and each state change the look
makes in three statements (``venues.transactions``). A test here fails if the per-look round
trips come back."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from movements.services import execution
from tests.movements.drive import node
from tests.statements import statements
from tests.venues.evm.conftest import transfer
from venues.evm.tx import track
from venues.models import ChainLedgerEntry, ChainTransaction, TxState

pytestmark = [pytest.mark.devchain, pytest.mark.django_db]
S = TxState

# The node's rows with the gap hint; nothing else when the look changes nothing.
STATEMENTS_LOOK_UNCHANGED = 1
# ... and a change of state: compare-and-set, the event's head, the event.
STATEMENTS_LOOK_CONFIRMS = 1 + 3
# ... into FINALIZED with the node's ledger entry (its INSERT alone).
STATEMENTS_LOOK_FINALIZES = 1 + 4


def broadcast_transfer(creator, recipient):
    """A transfer dispatched by one worker pass: signed, broadcast and (automine) mined, its
    node SUBMITTED, not looked at yet."""
    request = transfer(creator, recipient)
    execution.dispatch_ready_nodes(owner="test-worker")
    [tx] = ChainTransaction.objects.filter(movement=request)
    assert tx.state == S.BROADCAST
    return node(request, "transfer"), tx


def look(node_id):
    with CaptureQueriesContext(connection) as captured:
        found = track(node_id)
    # The look's own transaction is a savepoint inside the test's: not counted (see
    # ``tests.statements``); in a worker it is BEGIN/COMMIT.
    return found, statements(captured)


def test_a_look_reads_its_rows_in_one_statement_and_writes_each_change_in_three(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    transfer_node, tx = broadcast_transfer(creator, recipient)

    # Mined at 1 of 3 confirmations: CONFIRMED.
    found, sent = look(transfer_node.pk)
    tx.refresh_from_db()
    assert (found.status, tx.state, tx.confirmations) == ("waiting", S.CONFIRMED, 1)
    assert len(sent) == STATEMENTS_LOOK_CONFIRMS, "\n".join(sent)

    # The same head again: nothing changed, nothing written.
    found, sent = look(transfer_node.pk)
    assert found.status == "waiting"
    assert len(sent) == STATEMENTS_LOOK_UNCHANGED, "\n".join(sent)

    # Final by the policy (3 confirmations and the finalized tag): FINALIZED with its ledger
    # entry (its INSERT alone).
    devchain.mine(4)
    found, sent = look(transfer_node.pk)
    tx.refresh_from_db()
    assert (found.status, tx.state) == ("finalized", S.FINALIZED)
    assert tx.confirmations >= 3
    assert len(sent) == STATEMENTS_LOOK_FINALIZES, "\n".join(sent)
    assert ChainLedgerEntry.objects.filter(chain_transaction=tx).count() == 1
    assert [e.to_state for e in tx.events.order_by("id")] == [
        "CREATED",
        "SIGNED",
        "BROADCAST",
        "CONFIRMED",
        "FINALIZED",
    ]


def test_a_look_at_a_transaction_not_mined_yet_marks_it_pending(
    devchain, tokens, chain_config, fast_worker, creator, recipient
):
    devchain.set_automine(False)
    transfer_node, tx = broadcast_transfer(creator, recipient)

    found, _ = look(transfer_node.pk)

    tx.refresh_from_db()
    assert found.status == "waiting" and found.winner is None
    # Not mined: looked up in the mempool, seen there.
    assert tx.state == S.PENDING

"""The chain-transaction table: every change is an edge of the table, with its event."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qtg.core.actors import Actor
from qtg.core.errors import IllegalStateTransition, StaleState
from venues.models import (
    FINAL_TX_STATES,
    TERMINAL_TX_STATES,
    TX_TRANSITIONS,
    ChainLedgerEntry,
    ChainTransaction,
    ChainTransactionEvent,
    LedgerKind,
    TxState,
    can_transition_tx_state,
)
from venues.transactions import (
    chain_transaction_create,
    chain_transaction_record,
    chain_transaction_transition,
)

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("test")
S = TxState


def new_tx(**kwargs):
    return chain_transaction_create(
        chain="devchain",
        sender="0xabc",
        nonce=7,
        unsigned={"to": "0xdef"},
        actor=ACTOR,
        family="evm",
        **kwargs,
    )


def walk(tx, *states, **fields):
    for state in states:
        tx = chain_transaction_transition(
            chain_transaction_id=tx.pk, to_state=state, actor=ACTOR, evidence={"to": state}
        )
    return tx


def test_a_transaction_walks_the_happy_path_with_one_event_per_step():
    tx = new_tx()

    tx = walk(tx, S.SIGNED, S.BROADCAST, S.PENDING, S.CONFIRMED, S.FINALIZED)

    steps = list(tx.events.values_list("from_state", "to_state"))
    assert steps == [
        ("", "CREATED"),
        ("CREATED", "SIGNED"),
        ("SIGNED", "BROADCAST"),
        ("BROADCAST", "PENDING"),
        ("PENDING", "CONFIRMED"),
        ("CONFIRMED", "FINALIZED"),
    ]
    assert tx.signed_at and tx.broadcast_at and tx.pending_at and tx.finalized_at


def test_an_illegal_edge_is_refused_and_nothing_is_written():
    tx = walk(new_tx(), S.SIGNED)

    with pytest.raises(IllegalStateTransition):
        chain_transaction_transition(chain_transaction_id=tx.pk, to_state=S.FINALIZED, actor=ACTOR)

    tx.refresh_from_db()
    assert tx.state == S.SIGNED
    assert tx.events.count() == 2


def test_a_reorg_walks_a_confirmed_transaction_back_to_pending_with_its_evidence():
    tx = walk(new_tx(), S.SIGNED, S.BROADCAST, S.CONFIRMED)

    chain_transaction_transition(
        chain_transaction_id=tx.pk,
        to_state=S.PENDING,
        actor=ACTOR,
        evidence={"reorg": {"old_block_hash": "0x01"}},
        fields={"block_number": None, "block_hash": ""},
    )

    last = tx.events.order_by("-id").first()
    assert (last.from_state, last.to_state) == ("CONFIRMED", "PENDING")
    assert last.evidence == {"reorg": {"old_block_hash": "0x01"}}


def test_signed_bytes_are_written_once_never_re_signed():
    tx = new_tx()
    walk_fields = {"raw_signed": "0x01", "tx_hash": "0xaa"}
    tx = chain_transaction_transition(
        chain_transaction_id=tx.pk, to_state=S.SIGNED, actor=ACTOR, fields=walk_fields
    )

    with pytest.raises(ValueError, match="written once"):
        chain_transaction_record(
            chain_transaction_id=tx.pk, actor=ACTOR, evidence={}, fields={"raw_signed": "0x02"}
        )
    tx.refresh_from_db()
    assert tx.raw_signed == "0x01"


def test_a_transition_from_a_state_read_earlier_is_stale_once_someone_moved_it():
    tx = walk(new_tx(), S.SIGNED, S.BROADCAST)

    with pytest.raises(StaleState):
        chain_transaction_transition(
            chain_transaction_id=tx.pk, to_state=S.BROADCAST, actor=ACTOR, expected=[S.SIGNED]
        )


def test_events_are_append_only():
    event = ChainTransactionEvent.objects.filter(chain_transaction=new_tx()).get()

    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        ChainTransactionEvent.objects.all().delete()


def test_expired_is_reachable_only_before_inclusion_and_is_terminal():
    sources = {state for state, targets in TX_TRANSITIONS.items() if S.EXPIRED in targets}
    assert sources == {S.SIGNED, S.BROADCAST, S.PENDING}
    assert S.EXPIRED in TERMINAL_TX_STATES


@given(st.sampled_from(list(TxState)), st.sampled_from(list(TxState)))
def test_can_transition_is_exactly_the_table(current, new):
    assert can_transition_tx_state(current, new) == (new in TX_TRANSITIONS[current])


def test_final_states_have_no_way_out_and_provisional_exits_walk_back_only_to_the_chain():
    assert TERMINAL_TX_STATES == {S.FINALIZED, S.FAILED, S.REPLACED, S.DROPPED, S.EXPIRED}
    assert FINAL_TX_STATES == {S.FINALIZED, S.FAILED, S.EXPIRED}
    assert not TX_TRANSITIONS[S.FAILED] and not TX_TRANSITIONS[S.EXPIRED]
    # FINALIZED's one exit: the chain itself took it away (a final reorg), back to PENDING.
    assert TX_TRANSITIONS[S.FINALIZED] == {S.PENDING}
    # A later sighting: mined (CONFIRMED) or in the mempool again (PENDING); never signed
    # or broadcast again by QTG, never straight to FINALIZED.
    assert TX_TRANSITIONS[S.REPLACED] == {S.CONFIRMED, S.PENDING}
    assert TX_TRANSITIONS[S.DROPPED] == {S.CONFIRMED, S.PENDING}
    assert ChainTransaction.objects.count() == 0


@pytest.mark.parametrize("exit_state", [S.REPLACED, S.DROPPED])
def test_a_provisional_exit_walks_back_with_its_evidence(exit_state):
    tx = walk(new_tx(), S.SIGNED, S.BROADCAST, S.PENDING, exit_state)

    tx = chain_transaction_transition(
        chain_transaction_id=tx.pk,
        to_state=S.CONFIRMED,
        actor=ACTOR,
        evidence={"walked_back": "mined after all", "block_hash": "0xb1"},
        fields={"block_number": 12, "block_hash": "0xb1"},
    )

    assert tx.state == S.CONFIRMED and tx.block_hash == "0xb1"
    back = tx.events.get(from_state=exit_state, to_state=S.CONFIRMED)
    assert back.evidence["walked_back"] == "mined after all"
    with pytest.raises(IllegalStateTransition):
        walk(walk(new_tx(), S.SIGNED, exit_state), S.FINALIZED)


def test_a_nodes_transaction_is_in_the_ledger_at_finality_and_a_final_reorg_compensates_it(
    make_movement,
):
    movement = make_movement(amount="12.5")
    owner = movement.nodes.order_by("id").first()
    tx = walk(new_tx(movement_id=movement.pk, node_id=owner.pk), S.SIGNED, S.CONFIRMED)
    assert not ChainLedgerEntry.objects.exists()

    tx = walk(tx, S.FINALIZED)
    [final] = ChainLedgerEntry.objects.all()
    tx = chain_transaction_transition(
        chain_transaction_id=tx.pk,
        to_state=S.PENDING,
        actor=ACTOR,
        evidence={"final_reorg": {"old_block_hash": "0xb1"}},
    )

    final, reversal = ChainLedgerEntry.objects.order_by("id")
    assert (final.kind, final.amount, final.asset) == (LedgerKind.FINAL, movement.amount, "USDC")
    assert reversal.kind == LedgerKind.REVERSAL and reversal.compensates == final
    assert reversal.amount == -movement.amount
    assert reversal.evidence["final_reorg"]["old_block_hash"] == "0xb1"
    with pytest.raises(TypeError):
        final.save()
    # Final again (re-included): a new entry; the old pair stays as it was.
    walk(tx, S.CONFIRMED, S.FINALIZED)
    assert [e.kind for e in ChainLedgerEntry.objects.order_by("id")] == [
        "final",
        "reversal",
        "final",
    ]


def test_a_transaction_of_no_node_writes_no_ledger_entry():
    walk(new_tx(), S.SIGNED, S.CONFIRMED, S.FINALIZED, S.PENDING)

    assert not ChainLedgerEntry.objects.exists()


def test_a_contradicted_conclusion_sends_an_executing_movement_to_manual_intervention(
    make_movement,
):
    from movements.models import MovementAttention
    from movements.public import node_conclusion_contradicted
    from movements.services import set_node_state, set_request_state

    movement = make_movement(approve=True)
    set_request_state(movement, "EXECUTING", actor=ACTOR)
    first = movement.nodes.order_by("id").first()
    first.request = movement
    set_node_state(node=first, new_state="FAILED", actor=ACTOR, detail={"given": "concluded"})

    state = node_conclusion_contradicted(
        node_id=first.pk,
        reason="late_result",
        message="its transaction is mined",
        evidence={"late_sighting": {"block_hash": "0xb1"}},
        actor=ACTOR,
    )

    movement.refresh_from_db()
    assert state == movement.request_state == "MANUAL_INTERVENTION"
    assert movement.reservation.state == "HELD"
    attention = MovementAttention.objects.get(request=movement)
    assert attention.reason == "late_result" and attention.node_id == first.pk
    assert attention.evidence["late_sighting"]["block_hash"] == "0xb1"

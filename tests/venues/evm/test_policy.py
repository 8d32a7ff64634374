"""The transaction manager's pure policy (``venues.evm.tx.policy``): tables of cases and
hypothesis properties over every input -- "never FAILED while a receipt exists at any
endpoint", "at most one landing per transfer"."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from venues.evm.config import Finality
from venues.evm.tx import policy
from venues.evm.tx.policy import (
    AfterReceipts,
    Answer,
    Bump,
    NonceFacts,
    Seen,
    Step,
    Verdict,
    after_receipts,
    after_send,
    bump_step,
    final,
    mempool_step,
    recovered,
    verdict,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


# --- tables -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "txs", "expected"),
    [
        ("nothing yet", [], AfterReceipts(conclude="none")),
        ("created, not signed", [Seen(1, "CREATED", signed=False)], AfterReceipts(mempool=1)),
        ("broadcast, no receipt", [Seen(1, "BROADCAST")], AfterReceipts(mempool=1)),
        ("mined", [Seen(1, "PENDING", receipt_block="0xb")], AfterReceipts(winner=1)),
        (
            "the bump mined, the original REPLACED",
            [Seen(1, "PENDING"), Seen(2, "PENDING", receipt_block="0xb")],
            AfterReceipts(winner=2, replaced=(1,)),
        ),
        (
            "the original mined after the bump had won (a reorg): the receipt decides",
            [Seen(1, "REPLACED", receipt_block="0xc"), Seen(2, "PENDING")],
            AfterReceipts(winner=1, replaced=(2,)),
        ),
        (
            "DROPPED, then mined after all: walks back",
            [Seen(1, "DROPPED", receipt_block="0xc")],
            AfterReceipts(winner=1),
        ),
        (
            "a CONFIRMED one left the canonical chain",
            [Seen(1, "CONFIRMED", recorded_block="0xa")],
            AfterReceipts(walk_back=(1,), mempool=1),
        ),
        (
            "a CONFIRMED one moved to another block",
            [Seen(1, "CONFIRMED", receipt_block="0xb", recorded_block="0xa")],
            AfterReceipts(walk_back=(1,), winner=1),
        ),
        (
            "still in its block",
            [Seen(1, "CONFIRMED", receipt_block="0xa", recorded_block="0xa")],
            AfterReceipts(winner=1),
        ),
        ("final already", [Seen(1, "FINALIZED")], AfterReceipts(settled=1)),
        (
            "reverted at finality",
            [Seen(1, "FAILED", reverted_final=True)],
            AfterReceipts(settled=1),
        ),
        ("dropped, nothing mined", [Seen(1, "DROPPED")], AfterReceipts(conclude="dropped")),
        (
            "replaced by a filler, nothing live",
            [Seen(1, "REPLACED")],
            AfterReceipts(conclude="none"),
        ),
    ],
)
def test_after_receipts(case, txs, expected):
    assert after_receipts(txs) == expected, case


@pytest.mark.parametrize(
    ("state", "in_pool", "since", "expected"),
    [
        ("CREATED", False, None, Step.SIGN),
        ("SIGNED", True, None, Step.MARK_PENDING),
        ("BROADCAST", True, 1, Step.MARK_PENDING),
        ("PENDING", True, 1, Step.KEEP),
        ("BROADCAST", False, 1, Step.WAIT),
        ("BROADCAST", False, 30, Step.RESEND),
        ("SIGNED", False, None, Step.RESEND),
        ("PENDING", False, 1, Step.RESEND),  # absent from the pool: stored bytes at each look
    ],
)
def test_mempool_step(state, in_pool, since, expected):
    assert mempool_step(state=state, in_pool=in_pool, since_broadcast=since, window=10) == expected


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ("sent", Answer.BROADCAST),
        ("known", Answer.BROADCAST),  # incl. Erigon's "existing tx with same hash"
        ("nonce_used", Answer.CHECK_NONCE),  # never a failure without the facts
        ("nonce_ahead", Answer.WAIT_LOWER),  # "nonce too high": no page
        ("refused", Answer.REFUSED),
    ],
)
def test_after_send(outcome, expected):
    assert after_send(outcome) == expected


@pytest.mark.parametrize(
    ("stuck", "lower", "used", "expected"),
    [
        (5, False, None, Bump.NOT_YET),
        (60, True, None, Bump.WAIT_LOWER),
        (60, False, 8, Bump.WAIT_RECEIPT),  # used at the head: a bump could never be mined
        (60, False, 7, Bump.BUMP),
        (60, False, None, Bump.BUMP),
    ],
)
def test_bump_step(stuck, lower, used, expected):
    got = bump_step(
        stuck_seconds=stuck, replace_after=30, lower_unconfirmed=lower, nonce=7, used_at_head=used
    )
    assert got == expected


@pytest.mark.parametrize(
    ("finality", "head", "checkpoint", "expected"),
    [
        (Finality(True, 0), 120, 99, False),  # above the chain's finalized block
        (Finality(True, 0), 120, 100, True),
        (Finality(False, 12, "tag unreliable"), 110, None, False),
        (Finality(False, 12, "tag unreliable"), 111, None, True),
        (Finality(True, 12, "both"), 200, 99, False),  # deep, but above the checkpoint
        (Finality(True, 12, "both"), 105, 100, False),  # final tag, not deep enough
        (Finality(True, 12, "both"), 111, 100, True),
    ],
)
def test_the_one_finality_rule(finality, head, checkpoint, expected):
    assert final(finality, head=head, block=100, checkpoint=checkpoint) == expected


def test_a_depth_not_reached_needs_no_checkpoint():
    assert not policy.needs_checkpoint(Finality(True, 12, "both"), head=105, block=100)
    assert policy.needs_checkpoint(Finality(True, 0), head=100, block=100)


# --- properties ---------------------------------------------------------------------------

STATES = ["CREATED", "SIGNED", "BROADCAST", "PENDING", "CONFIRMED", "REPLACED", "DROPPED"]
blocks = st.one_of(st.none(), st.sampled_from(["0xa", "0xb"]))


@st.composite
def looks(draw):
    """A node's transactions (one nonce) as a look may find them: states, receipts at the
    primary endpoint, and whether another endpoint serves a receipt of one of them."""
    n = draw(st.integers(1, 4))
    txs = []
    for i in range(n):
        state = draw(st.sampled_from(STATES))
        signed = state != "CREATED"
        txs.append(
            Seen(
                id=i + 1,
                state=state,
                signed=signed,
                receipt_block=draw(blocks) if signed else None,
                recorded_block=draw(st.sampled_from(["0xa", "0xb"]))
                if state == "CONFIRMED"
                else "",
            )
        )
    # Only a signed transaction can have a receipt anywhere.
    return txs, draw(st.booleans()) and any(tx.signed for tx in txs)


def outcome_of(txs, receipt_elsewhere: bool, nonce_facts: NonceFacts) -> str:
    """What the node would be told from one look: the pipeline ``track`` and recovery run
    (after_receipts -> finality or the mempool -> the nonce verdict -> recovered)."""
    plan = after_receipts(txs, receipt_elsewhere=receipt_elsewhere)
    if plan.winner is not None:
        status, mined = "waiting", True  # confirmed: finality or a revert decides later
    elif plan.mempool is not None:
        facts = nonce_facts.__class__(
            **{**nonce_facts.__dict__, "receipt_anywhere": receipt_elsewhere}
        )
        status = "dropped" if verdict(facts) == Verdict.DROP else "waiting"
        mined = False
    else:
        status, mined = plan.conclude, False
    return recovered(
        signed=any(tx.signed for tx in txs),
        observed="PENDING",
        track_status=status,
        mined=mined,
        refused=False,
    )


nonce_facts = st.builds(
    NonceFacts,
    nonce=st.just(7),
    nonce_latest=st.integers(6, 9),
    nonce_finalized=st.integers(6, 9),
    spent_by=st.one_of(st.none(), st.just("0xother")),
    ours=st.just(False),
    spent_block=st.one_of(st.none(), st.integers(90, 110)),
    finalized_block=st.integers(90, 110),
    noted_at=st.one_of(st.none(), st.integers(0, 100).map(lambda s: NOW - timedelta(seconds=s))),
    now=st.just(NOW),
    window_seconds=st.integers(0, 60),
    watch_seconds=st.integers(0, 60),
)


@given(looks(), nonce_facts)
def test_never_failed_while_a_receipt_exists_at_any_endpoint(look, facts):
    txs, elsewhere = look
    receipt_here = any(tx.receipt_block is not None for tx in txs)
    outcome = outcome_of(txs, elsewhere, facts)
    if receipt_here or elsewhere:
        assert outcome != "FAILED"
        plan = after_receipts(txs, receipt_elsewhere=elsewhere)
        assert plan.conclude != "dropped"


@given(looks())
def test_at_most_one_landing_per_transfer(look):
    txs, _ = look
    plan = after_receipts(txs)
    if plan.winner is not None:
        # One winner; every other live transaction of the nonce is REPLACED by it, and
        # nothing is re-sent or bumped (the mempool step is not asked).
        assert plan.mempool is None
        live = {tx.id for tx in txs if tx.state in policy.LIVE or tx.state == "CREATED"}
        assert set(plan.replaced) == live - {plan.winner}
        assert plan.winner not in plan.replaced
        assert any(tx.id == plan.winner and tx.receipt_block for tx in txs)
    else:
        assert not any(tx.receipt_block for tx in txs if tx.signed)
    # Only a transaction recorded CONFIRMED walks back, and never the final one.
    assert set(plan.walk_back) <= {tx.id for tx in txs if tx.state == "CONFIRMED"}


@given(looks())
def test_the_winner_is_the_first_mined_in_signing_order(look):
    txs, _ = look
    plan = after_receipts(txs)
    mined = [
        tx.id
        for tx in txs
        if tx.signed and tx.receipt_block and tx.state in (*policy.LIVE, *policy.PROVISIONAL)
    ]
    assert plan.winner == (mined[0] if mined else None)


@given(
    st.sampled_from(STATES),
    st.booleans(),
    st.one_of(st.none(), st.floats(0, 100)),
)
def test_a_live_transaction_off_the_network_is_always_resent_or_waited_for(state, pool, since):
    step = mempool_step(state=state, in_pool=pool, since_broadcast=since, window=10)
    if state == "CREATED":
        assert step == Step.SIGN
    elif not pool and state in ("SIGNED", "PENDING"):
        assert step == Step.RESEND  # its stored bytes, never re-signed
    assert step in Step


def test_dropped_is_not_concluded_while_another_endpoint_serves_a_receipt():
    txs = [Seen(1, "DROPPED"), Seen(2, "DROPPED")]
    assert after_receipts(txs).conclude == "dropped"
    assert after_receipts(txs, receipt_elsewhere=True).conclude == "waiting"

"""Properties of the pure chain policies over simulated chain histories (issue 25's "never
FAILED while a receipt exists at any endpoint" and "at most one landing per transfer").

A history is the truth: which slots hold blocks (skipped slots: block height < slot), whether
and where the first transaction lands (only in a block whose height is at most its
blockhash's last valid height), and what each reader sees of it (a status view that lags,
a finalized slot behind the head, several endpoints on EVM). The policy only ever sees the
readings; the properties compare its answers with the truth."""

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from venues.evm.tx.policy import NonceFacts, Verdict, verdict
from venues.solana.fate import COMMITMENTS, Fate, Seen, fate

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@st.composite
def solana_histories(draw):
    """A chain of ``slots`` slots, some skipped; the transaction's last valid height; the slot
    it lands in (or never); the head, the finalized slot and the status view's context slot."""
    slots = draw(st.integers(2, 60))
    produced = draw(st.lists(st.booleans(), min_size=slots, max_size=slots))
    heights, height = [], 0
    for made in produced:
        height += made
        heights.append(height)  # the block height at each slot (a skipped slot adds none)
    last_valid = draw(st.integers(0, heights[-1] + 2))
    can_land = [s for s in range(slots) if produced[s] and heights[s] <= last_valid]
    landed = draw(st.one_of(st.none(), st.sampled_from(can_land))) if can_land else None
    head = draw(st.integers(0, slots - 1))
    final_slot = draw(st.integers(0, head))
    status_slot = draw(st.one_of(st.none(), st.integers(0, head)))
    return heights, last_valid, landed, head, final_slot, status_slot


def read(history):
    """What the executor reads: the status (as the lagging status view has it), the finalized
    height, and whether the node still calls the blockhash valid (at its head)."""
    heights, last_valid, landed, head, final_slot, status_slot = history
    visible = landed is not None and status_slot is not None and landed <= status_slot
    return Seen(
        landed if visible else None,
        "finalized" if visible and landed <= final_slot else ("confirmed" if visible else None),
        None,
        heights[final_slot],
        heights[head] <= last_valid,
        last_valid,
        status_slot=status_slot,
        final_slot=final_slot,
    )


@given(solana_histories(), st.sampled_from(COMMITMENTS))
def test_solana_expired_only_for_a_transaction_that_never_lands(history, wanted):
    """EXPIRED is what lets a second transaction be signed: never for one that lands, at any
    slot of the history, before or after the reading."""
    if fate(read(history), wanted=wanted) == Fate.EXPIRED:
        assert history[2] is None, history


@given(solana_histories(), st.sampled_from(COMMITMENTS))
def test_solana_at_most_one_landing_per_transfer(history, wanted):
    """The executor signs the next transaction of a transfer only on EXPIRED of the one before
    (the same bytes are re-sent otherwise): of the first and the one after it, at most one
    lands, whatever the second does."""
    first_lands = history[2] is not None
    second_signed = fate(read(history), wanted=wanted) == Fate.EXPIRED
    assert first_lands + second_signed <= 1


@st.composite
def evm_histories(draw):
    """One nonce of a sender: whether one of our transactions is mined (and which endpoints
    serve its receipt: some lag, the primary may be on another fork), or a foreign one used
    the nonce; what the primary read."""
    endpoints = draw(st.integers(1, 4))
    ours_mined = draw(st.booleans())
    serving = draw(st.lists(st.booleans(), min_size=endpoints, max_size=endpoints))
    if not ours_mined:
        serving = [False] * endpoints
    # The primary may be on another fork than an endpoint that serves ours (a reorg in
    # flight): it then sees no user of the nonce yet, or the foreign one.
    fork = ours_mined and any(serving[1:]) and draw(st.booleans())
    if fork:
        serving[0] = False
    primary_sees_ours = ours_mined and not fork and draw(st.booleans())
    # One nonce is used once per fork: on ours, the user the primary finds is ours or none
    # (a lagging index); otherwise none yet or the foreign one.
    spender = (
        ("0xours" if primary_sees_ours else None)
        if ours_mined and not fork
        else draw(st.sampled_from([None, "0xother"]))
    )
    finalized = draw(st.integers(0, 100))
    spent_block = draw(st.one_of(st.none(), st.integers(0, 120)))
    facts = NonceFacts(
        nonce=5,
        nonce_latest=draw(st.integers(4, 8)),
        nonce_finalized=draw(st.integers(4, 8)),
        spent_by=spender,
        ours=primary_sees_ours,
        spent_block=spent_block,
        finalized_block=finalized,
        noted_at=draw(
            st.one_of(st.none(), st.integers(0, 300).map(lambda s: NOW - timedelta(seconds=s)))
        ),
        now=NOW,
        window_seconds=draw(st.integers(0, 60)),
        watch_seconds=draw(st.integers(0, 120)),
        receipt_anywhere=any(serving),
        contradicted=draw(st.booleans()),
    )
    return ours_mined, any(serving), facts


@settings(max_examples=400)
@given(evm_histories())
def test_evm_never_failed_while_a_receipt_exists_at_any_endpoint(history):
    """DROP is the only verdict that ends a transfer FAILED without a mined receipt of its
    own: never while any endpoint serves one of our receipts."""
    _, served, facts = history
    if served:
        assert verdict(facts) != Verdict.DROP


@settings(max_examples=400)
@given(evm_histories())
def test_evm_at_most_one_landing_per_transfer(history):
    """A transfer's transactions share one nonce (replacements included): a new transfer
    transaction (a new nonce) is only ever signed after DROP, and DROP needs a foreign
    transaction at finality -- so ours and a replacement never both land."""
    ours_mined, served, facts = history
    if verdict(facts) == Verdict.DROP:
        assert not ours_mined and not served
        assert not facts.ours and facts.spent_by == "0xother"

"""The pure rule that decides a transaction whose nonce the node calls used
(``venues.evm.tx.policy``): a table of cases and properties over every input."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from venues.evm.tx.policy import NonceFacts, Verdict, verdict

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def facts(**overrides) -> NonceFacts:
    values = {
        "nonce": 7,
        "nonce_latest": 8,
        "nonce_finalized": 8,
        "spent_by": "0xother",
        "ours": False,
        "spent_block": 100,
        "finalized_block": 120,
        "noted_at": NOW - timedelta(seconds=30),
        "now": NOW,
        "window_seconds": 10,
    }
    return NonceFacts(**(values | overrides))


@pytest.mark.parametrize(
    ("case", "overrides", "expected"),
    [
        ("used by ours (a lagging lookup)", {"ours": True, "spent_by": "0xours"}, Verdict.MINED),
        ("ours, even at finality", {"ours": True, "nonce_finalized": 9}, Verdict.MINED),
        ("the node is behind: not used at its head", {"nonce_latest": 7}, Verdict.RESEND),
        ("used, not final", {"nonce_finalized": 7}, Verdict.WAIT),
        ("its block above the finalized one", {"spent_block": 121}, Verdict.WAIT),
        ("the user of the nonce not found", {"spent_by": None}, Verdict.WAIT),
        ("final, first seen now", {"noted_at": None}, Verdict.NOTE),
        ("final, seen again too soon", {"noted_at": NOW - timedelta(seconds=3)}, Verdict.WAIT),
        ("final, seen a window apart", {}, Verdict.DROP),
        (
            "final a window apart, still in the post-final watch",
            {"watch_seconds": 60},
            Verdict.WAIT,
        ),
        ("final, watched long enough", {"watch_seconds": 30}, Verdict.DROP),
        ("a receipt of ours at another endpoint", {"receipt_anywhere": True}, Verdict.MINED),
        ("another endpoint contradicts the absence", {"contradicted": True}, Verdict.WAIT),
    ],
)
def test_the_rule_table(case, overrides, expected):
    assert verdict(facts(**overrides)) == expected, case


fact_sets = st.builds(
    NonceFacts,
    nonce=st.integers(0, 50),
    nonce_latest=st.integers(0, 60),
    nonce_finalized=st.integers(0, 60),
    spent_by=st.one_of(st.none(), st.sampled_from(["0xa", "0xb"])),
    ours=st.booleans(),
    spent_block=st.one_of(st.none(), st.integers(0, 200)),
    finalized_block=st.integers(0, 200),
    noted_at=st.one_of(st.none(), st.integers(0, 100).map(lambda s: NOW - timedelta(seconds=s))),
    now=st.just(NOW),
    window_seconds=st.integers(0, 60),
    watch_seconds=st.integers(0, 120),
    receipt_anywhere=st.booleans(),
    contradicted=st.booleans(),
)


@given(fact_sets)
def test_never_dropped_while_a_transaction_of_ours_used_the_nonce(found):
    if found.ours:
        assert verdict(found) == Verdict.MINED


@given(fact_sets)
def test_dropped_only_on_a_foreign_transaction_at_finality_seen_a_window_apart(found):
    if verdict(found) == Verdict.DROP:
        assert not found.ours and found.spent_by is not None
        assert found.nonce_finalized > found.nonce
        assert found.spent_block is not None and found.spent_block <= found.finalized_block
        assert found.noted_at is not None
        waited = (found.now - found.noted_at).total_seconds()
        assert waited >= found.window_seconds and waited >= found.watch_seconds
        assert not found.contradicted


@given(fact_sets)
def test_never_dropped_while_a_receipt_of_ours_exists_at_any_endpoint(found):
    """Dropped is what fails the node: never while some endpoint serves one of our receipts."""
    if found.receipt_anywhere:
        assert verdict(found) == Verdict.MINED


@pytest.mark.parametrize(
    ("case", "facts_", "expected"),
    [
        ("nothing signed", {"signed": False}, "FAILED"),
        ("final", {"observed": "COMPLETED", "track_status": "finalized"}, "COMPLETED"),
        ("mined, reverted", {"observed": "FAILED", "track_status": "failed"}, "FAILED"),
        ("dropped at finality", {"observed": "UNKNOWN", "track_status": "dropped"}, "FAILED"),
        ("mined, not final", {"mined": True}, "SUBMITTED"),
        ("in the mempool or just handed over", {}, "SUBMITTED"),
        ("the node refuses the bytes", {"refused": True}, "UNRESOLVED"),
        ("mined although refused once", {"refused": True, "mined": True}, "SUBMITTED"),
        ("nothing to look at", {"track_status": "none"}, "UNRESOLVED"),
    ],
)
def test_one_recovery_rule_for_every_evm_sender(case, facts_, expected):
    from venues.evm.tx.policy import recovered

    given_ = {
        "signed": True,
        "observed": "PENDING",
        "track_status": "waiting",
        "mined": False,
        "refused": False,
    } | facts_
    assert recovered(**given_) == expected, case

"""The rules that turn a venue's answer into a node transition (``execution.outcomes``): the
error taxonomy as table cases, plus property-based tests over any answer, error and node. Pure:
no database."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from movements.executors.base import (
    AmbiguousError,
    DeterministicError,
    Observation,
    ObservedStatus,
    Prepared,
    RecoveredOutcome,
    Recovery,
    Submitted,
    TransientError,
    VenueWait,
)
from movements.services.execution.outcomes import (
    REAPED,
    STEP_STATES,
    NodeFacts,
    Then,
    Timing,
    backoff,
    contradicts_failure,
    decide,
    evidence,
    is_wait,
    lease_expired,
)
from movements.states import TERMINAL_NODE_STATES, NodeState, can_transition_node_state

NS = NodeState
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TIMING = Timing(
    lease_seconds=60,
    poll_seconds=5,
    retry_base_seconds=2,
    retry_max_seconds=300,
    max_dispatches=10,
)
RELEASED = {"lease_owner": "", "lease_expires_at": None}


def node(state, **facts) -> NodeFacts:
    return NodeFacts(state=state, **facts)


def observation(status, **kwargs) -> Observation:
    return Observation(status=status, **kwargs)


def obs(status: str) -> Observation:
    return Observation(status=ObservedStatus[status])


def rec(outcome: str, ref: str = "") -> Recovery:
    return Recovery(RecoveredOutcome[outcome], ref)


REFUSED, BUSY, LOST, BUG = (
    DeterministicError("no"),
    TransientError("busy"),
    AmbiguousError("lost"),
    RuntimeError("bug"),
)
ADVANCE, DERIVE = Then.ADVANCE, Then.DERIVE
PREPARING, SIGNING, SUBMITTING = NS.PREPARING, NS.AWAITING_SIGNATURE, NS.SUBMITTING
SUBMITTED, OBSERVING, UNKNOWN = NS.SUBMITTED, NS.OBSERVING, NS.UNKNOWN

# name, phase, state, answer, error, target, then
TABLE = [
    ("prepare refused", "prepare", PREPARING, None, REFUSED, NS.FAILED, DERIVE),
    ("prepare busy", "prepare", PREPARING, None, BUSY, NS.READY, DERIVE),
    ("prepare crashed", "prepare", PREPARING, None, BUG, NS.READY, DERIVE),
    ("prepare timed out", "prepare", PREPARING, None, LOST, NS.READY, DERIVE),
    ("prepared to sign", "prepare", PREPARING, Prepared({"fee": 1}), None, SIGNING, None),
    ("sign refused", "sign", SIGNING, None, REFUSED, NS.FAILED, DERIVE),
    ("sign timed out", "sign", SIGNING, None, TimeoutError(), NS.READY, DERIVE),
    ("submitted", "submit", SUBMITTING, Submitted("tx1"), None, SUBMITTED, None),
    ("submit done", "submit", SUBMITTING, Submitted("w1", True), None, NS.COMPLETED, ADVANCE),
    ("submit refused", "submit", SUBMITTING, None, REFUSED, NS.FAILED, DERIVE),
    ("submit busy", "submit", SUBMITTING, None, BUSY, UNKNOWN, DERIVE),
    ("submit timed out", "submit", SUBMITTING, None, TimeoutError(), UNKNOWN, DERIVE),
    ("submit lost", "submit", SUBMITTING, None, LOST, UNKNOWN, DERIVE),
    ("observed final", "observe", OBSERVING, obs("COMPLETED"), None, NS.COMPLETED, ADVANCE),
    ("final at first look", "observe", SUBMITTED, obs("COMPLETED"), None, NS.COMPLETED, ADVANCE),
    ("observed failed", "observe", OBSERVING, obs("FAILED"), None, NS.FAILED, DERIVE),
    ("observed unsure", "observe", OBSERVING, obs("UNKNOWN"), None, UNKNOWN, DERIVE),
    ("observed a reorg", "observe", OBSERVING, obs("REORG"), None, UNKNOWN, DERIVE),
    ("first look, pending", "observe", SUBMITTED, obs("PENDING"), None, OBSERVING, None),
    ("still pending", "observe", OBSERVING, obs("PENDING"), None, None, None),
    ("observe busy", "observe", OBSERVING, None, BUSY, None, None),
    ("observe refused", "observe", SUBMITTED, None, REFUSED, NS.FAILED, DERIVE),
    ("observe crashed", "observe", OBSERVING, None, BUG, UNKNOWN, DERIVE),
    ("recovered in flight", "recover", UNKNOWN, rec("SUBMITTED"), None, SUBMITTED, DERIVE),
    ("recovered done", "recover", UNKNOWN, rec("COMPLETED", "w1"), None, NS.COMPLETED, ADVANCE),
    ("recovered: never happened", "recover", UNKNOWN, rec("FAILED"), None, NS.FAILED, DERIVE),
    ("recovery unanswered", "recover", UNKNOWN, rec("UNRESOLVED"), None, None, None),
    ("recovery failed", "recover", UNKNOWN, None, BUSY, None, None),
]


@pytest.mark.parametrize(
    ("phase", "state", "answer", "error", "target", "then"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_each_answer_maps_to_its_transition(phase, state, answer, error, target, then):
    outcome = decide(phase, node(state, dispatch_count=1), answer, error, now=NOW, timing=TIMING)

    assert outcome.target == target
    assert outcome.then == then


def test_a_transient_error_before_submit_retries_after_a_backoff_and_counts_as_a_venue_error():
    facts = node(NS.PREPARING, dispatch_count=7, venue_errors=2)

    outcome = decide("prepare", facts, None, TransientError("busy"), now=NOW, timing=TIMING)

    assert outcome.fields == {
        **RELEASED,
        "last_error": "TransientError: busy",
        "venue_errors": 3,
        "next_attempt_at": NOW + timedelta(seconds=8),
    }
    assert outcome.detail == {
        "phase": "prepare",
        "error": "TransientError: busy",
        "venue_errors": 3,
        "retry_at": (NOW + timedelta(seconds=8)).isoformat(),
    }


def test_a_node_the_venue_failed_max_times_fails_instead_of_retrying():
    facts = node(NS.AWAITING_SIGNATURE, dispatch_count=10, venue_errors=9)

    outcome = decide("sign", facts, None, TransientError("busy"), now=NOW, timing=TIMING)

    assert outcome.target == NS.FAILED
    assert outcome.detail["gave_up_after_venue_errors"] == 10
    assert outcome.fields["last_error"] == (
        "gave up after 10 venue errors at sign; the last: TransientError: busy"
    )
    assert "next_attempt_at" not in outcome.fields


def test_claims_lost_to_worker_deaths_never_spend_the_budget():
    # Dispatched 50 times (49 claims lost to dead workers), the venue answered once: retried.
    facts = node(NS.PREPARING, dispatch_count=50, venue_errors=0)

    outcome = decide("prepare", facts, None, TransientError("busy"), now=NOW, timing=TIMING)

    assert outcome.target == NS.READY
    assert outcome.fields["venue_errors"] == 1


@pytest.mark.parametrize(
    "wait", [VenueWait("maintenance"), TransientError("429 too many", retry_after=30)]
)
def test_a_wait_the_venue_asked_for_never_spends_the_budget(wait):
    facts = node(NS.PREPARING, dispatch_count=40, venue_errors=9)

    outcome = decide("prepare", facts, None, wait, now=NOW, timing=TIMING)

    assert outcome.target == NS.READY
    assert "venue_errors" not in outcome.fields
    assert outcome.fields["result"]["waiting_since"] == NOW.isoformat()
    assert outcome.attention is None


def test_a_venue_that_keeps_a_node_waiting_too_long_asks_a_person_instead_of_failing():
    since = NOW - timedelta(seconds=TIMING.wait_attention_seconds + 1)
    facts = node(NS.PREPARING, venue_errors=9, result={"waiting_since": since.isoformat()})

    outcome = decide("prepare", facts, None, VenueWait("maintenance"), now=NOW, timing=TIMING)

    assert outcome.target == NS.READY
    assert outcome.attention["reason"] == "waiting_long"
    assert "nothing was sent" in outcome.attention["message"]
    assert outcome.fields["result"]["waiting_since"] == since.isoformat()


def test_a_preparation_to_sign_keeps_the_lease_and_extends_it():
    prepared = Prepared({"nonce": 7})

    outcome = decide(
        "prepare", node(NS.PREPARING, result={"quote": 1}), prepared, None, now=NOW, timing=TIMING
    )

    assert outcome.fields == {
        "result": {"quote": 1, "nonce": 7},
        "lease_expires_at": NOW + timedelta(seconds=60),
    }
    assert outcome.detail == {"nonce": 7}


def test_a_signed_payload_is_never_a_result_of_its_own():
    with pytest.raises(ValueError, match="no transition"):
        decide("sign", node(NS.AWAITING_SIGNATURE), Prepared(), None, now=NOW, timing=TIMING)


def test_an_accepted_submit_is_observed_after_the_poll_interval():
    answer = Submitted("tx-9", detail={"fee": "0.1"})

    outcome = decide("submit", node(NS.SUBMITTING), answer, None, now=NOW, timing=TIMING)

    assert outcome.fields == {
        **RELEASED,
        "next_attempt_at": NOW + timedelta(seconds=5),
        "external_ref": "tx-9",
        "result": {"fee": "0.1"},
    }
    assert outcome.detail == {"external_ref": "tx-9", "fee": "0.1"}


def test_an_ambiguous_submit_is_recovered_at_once_and_says_it_is_ambiguous():
    error = AmbiguousError("lost", evidence={"sent": True})

    outcome = decide("submit", node(NS.SUBMITTING), None, error, now=NOW, timing=TIMING)

    assert outcome.fields == {
        **RELEASED,
        "last_error": "AmbiguousError: lost",
        "next_attempt_at": NOW,
    }
    assert outcome.detail == {
        "phase": "submit",
        "ambiguous": True,
        "error": "AmbiguousError: lost",
        "evidence": {"sent": True},
    }


def test_a_reorg_is_recorded_with_its_evidence_before_the_node_goes_unknown():
    answer = observation(ObservedStatus.REORG, detail={"tx_hash": "0xab", "reorg_count": 1})

    outcome = decide("observe", node(NS.OBSERVING), answer, None, now=NOW, timing=TIMING)

    assert outcome.record == {"reorg": {"tx_hash": "0xab", "reorg_count": 1}}
    assert outcome.detail == {"observed": "REORG", "tx_hash": "0xab", "reorg_count": 1}
    assert outcome.fields["next_attempt_at"] == NOW


def test_an_observation_never_replaces_a_known_external_ref():
    answer = observation(ObservedStatus.COMPLETED, external_ref="other")

    known = node(NS.OBSERVING, external_ref="tx-1")

    kept = decide("observe", known, answer, None, now=NOW, timing=TIMING)
    learned = decide("observe", node(NS.OBSERVING), answer, None, now=NOW, timing=TIMING)

    assert kept.fields["external_ref"] == "tx-1"
    assert learned.fields["external_ref"] == "other"


def test_a_replacement_that_settled_replaces_the_nodes_external_ref_with_evidence():
    answer = observation(ObservedStatus.COMPLETED, external_ref="0xbump", replaced=True)

    outcome = decide(
        "observe", node(NS.OBSERVING, external_ref="0xfirst"), answer, None, now=NOW, timing=TIMING
    )

    assert outcome.target == NS.COMPLETED
    assert outcome.fields["external_ref"] == "0xbump"
    assert outcome.detail["replaced_external_ref"] == "0xfirst"


def test_a_venues_retry_after_is_never_cut_short_by_the_backoff():
    error = TransientError("429 Too Many Requests", retry_after=120)

    before = decide(
        "prepare", node(NS.PREPARING, dispatch_count=1), None, error, now=NOW, timing=TIMING
    )
    watching = decide("observe", node(NS.OBSERVING), None, error, now=NOW, timing=TIMING)

    assert before.target == NS.READY
    assert before.fields["next_attempt_at"] == NOW + timedelta(seconds=120)
    assert watching.fields["next_attempt_at"] == NOW + timedelta(seconds=120)


def test_an_executor_asks_a_person_through_its_answer_or_its_error():
    answer = observation(
        ObservedStatus.PENDING,
        detail={"attention": {"reason": "fee_cap", "message": "fee cap reached"}, "fee": "9"},
    )
    error = AmbiguousError("gone", evidence={"attention": {"reason": "dropped"}})

    asked = decide("observe", node(NS.OBSERVING), answer, None, now=NOW, timing=TIMING)
    failed = decide("observe", node(NS.OBSERVING), None, error, now=NOW, timing=TIMING)
    quiet = decide(
        "observe",
        node(NS.OBSERVING),
        observation(ObservedStatus.PENDING),
        None,
        now=NOW,
        timing=TIMING,
    )

    assert asked.attention["reason"] == "fee_cap"
    assert asked.attention["message"] == "fee cap reached"
    assert asked.attention["evidence"]["fee"] == "9"
    assert (failed.target, failed.attention["reason"]) == (NS.UNKNOWN, "dropped")
    assert quiet.attention is None


def test_a_pending_first_look_moves_to_observing_and_is_reported_as_no_new_state():
    answer = observation(ObservedStatus.PENDING, detail={"confirmations": 1})

    outcome = decide("observe", node(NS.SUBMITTED), answer, None, now=NOW, timing=TIMING)

    assert (outcome.target, outcome.pending) == (NS.OBSERVING, True)
    assert outcome.detail == {"confirmations": 1}
    assert outcome.fields["next_attempt_at"] == NOW + timedelta(seconds=5)


def test_a_transient_observe_error_polls_again_after_a_backoff_and_counts_the_streak():
    facts = node(NS.OBSERVING, dispatch_count=0)

    outcome = decide("observe", facts, None, TransientError("busy"), now=NOW, timing=TIMING)

    assert outcome.target is None
    assert outcome.fields == {
        **RELEASED,
        "last_error": "TransientError: busy",
        "next_attempt_at": NOW + timedelta(seconds=2),
        "error_streak": 1,
    }


@pytest.mark.parametrize(
    ("streak", "seconds"), [(0, 2), (1, 4), (2, 8), (4, 32), (7, 256), (8, 300), (40, 300)]
)
def test_transient_observe_errors_in_a_row_back_off_exponentially_up_to_the_cap(streak, seconds):
    facts = node(NS.OBSERVING, error_streak=streak)

    outcome = decide("observe", facts, None, TransientError("busy"), now=NOW, timing=TIMING)

    assert outcome.fields["next_attempt_at"] == NOW + timedelta(seconds=seconds)
    assert outcome.fields["error_streak"] == streak + 1


def test_an_answer_ends_the_error_streak():
    facts = node(NS.OBSERVING, error_streak=5)

    outcome = decide("observe", facts, obs(ObservedStatus.PENDING), None, now=NOW, timing=TIMING)

    assert outcome.fields["error_streak"] == 0
    assert outcome.fields["next_attempt_at"] == NOW + timedelta(seconds=5)


def test_not_found_is_no_proof_inside_the_visibility_window():
    timing = replace(TIMING, visibility_seconds=600)
    facts = node(NS.UNKNOWN, has_side_effect=True, submit_started_at=NOW - timedelta(seconds=60))
    never = Recovery(RecoveredOutcome.FAILED, detail={"finding": "no such withdrawal"})

    first = decide("recover", facts, never, None, now=NOW, timing=timing)

    assert first.target is None  # still UNKNOWN
    assert first.fields["next_attempt_at"] == NOW + timedelta(seconds=540)  # window's end
    assert first.fields["result"]["not_found_answers"] == 1


def test_not_found_proves_nothing_until_the_venue_was_asked_again():
    facts = node(NS.UNKNOWN, has_side_effect=True, submit_started_at=NOW - timedelta(hours=1))
    never = Recovery(RecoveredOutcome.FAILED, detail={"finding": "no such withdrawal"})

    first = decide("recover", facts, never, None, now=NOW, timing=TIMING)
    asked_again = replace(facts, result=first.fields["result"])
    second = decide("recover", asked_again, never, None, now=NOW, timing=TIMING)

    assert first.target is None
    assert second.target == NS.FAILED


def test_a_read_only_node_needs_no_second_answer():
    facts = node(NS.UNKNOWN, has_side_effect=False)
    failed = Recovery(RecoveredOutcome.FAILED, detail={"finding": "rejected"})

    assert decide("recover", facts, failed, None, now=NOW, timing=TIMING).target == NS.FAILED


def test_a_venue_refusing_the_recovery_question_asks_a_person():
    facts = node(NS.UNKNOWN, has_side_effect=True, dispatch_count=1)

    outcome = decide(
        "recover", facts, None, DeterministicError("bad config"), now=NOW, timing=TIMING
    )

    assert outcome.target is None  # never concluded
    assert outcome.attention["reason"] == "recovery_blocked"
    assert outcome.fields["next_attempt_at"] == NOW + timedelta(seconds=300)


@pytest.mark.parametrize(
    ("phase", "answer", "contradicts"),
    [
        ("submit", Submitted("wd-1"), True),
        ("observe", Observation(ObservedStatus.COMPLETED), True),
        ("observe", Observation(ObservedStatus.PENDING), True),
        ("observe", Observation(ObservedStatus.FAILED), False),
        ("recover", Recovery(RecoveredOutcome.COMPLETED), True),
        ("recover", Recovery(RecoveredOutcome.FAILED), False),
        ("submit", None, False),
    ],
)
def test_which_late_answers_contradict_a_failure(phase, answer, contradicts):
    assert contradicts_failure(phase, answer) is contradicts


def test_an_unanswered_recovery_counts_a_dispatch_and_backs_off():
    facts = node(NS.UNKNOWN, dispatch_count=2)

    outcome = decide("recover", facts, None, RuntimeError("down"), now=NOW, timing=TIMING)

    assert outcome.fields == {
        **RELEASED,
        "next_attempt_at": NOW + timedelta(seconds=8),
        "dispatch_count": 3,
        "last_error": "RuntimeError: down",
    }


def test_a_recovered_submit_is_observed_at_once_with_the_reference_found():
    answer = Recovery(RecoveredOutcome.SUBMITTED, "tx-7", {"found": True})

    facts = node(NS.UNKNOWN, external_ref="old")

    outcome = decide("recover", facts, answer, None, now=NOW, timing=TIMING)

    assert outcome.fields == {
        **RELEASED,
        "next_attempt_at": NOW,
        "external_ref": "tx-7",
        "result": {"found": True},
    }
    assert outcome.detail == {"resolution": "recovery", "found": True}


@pytest.mark.parametrize(
    ("state", "target", "retry_in"),
    [(PREPARING, NS.READY, 4), (SIGNING, NS.READY, 4), (SUBMITTING, UNKNOWN, 0)],
)
def test_an_expired_lease_sends_the_node_where_its_money_may_be(state, target, retry_in):
    expired = NOW - timedelta(seconds=1)
    facts = node(state, dispatch_count=2, lease_owner="w1", lease_expires_at=expired)

    outcome = lease_expired(facts, now=NOW, timing=TIMING)

    assert outcome.target == target
    # Derived again either way: a node back to READY may settle a movement waiting on it.
    assert outcome.then == Then.DERIVE
    assert outcome.fields["next_attempt_at"] == NOW + timedelta(seconds=retry_in)
    assert outcome.fields["lease_owner"] == "" and outcome.fields["lease_expires_at"] is None
    # The reason says so (not an earlier attempt's venue error), and nothing counts.
    assert outcome.fields["last_error"].startswith(
        f"the lease of worker w1 expired at {expired.isoformat()} during {state}"
    )
    assert "venue_errors" not in outcome.fields
    lost = {} if target == UNKNOWN else {"lost_since": expired.isoformat()}
    assert outcome.detail == {
        "reason": "lease expired",
        "lease_owner": "w1",
        "lease_expired_at": expired.isoformat(),
        **lost,
    }
    assert outcome.attention is None


@pytest.mark.parametrize(("lost_for", "asks"), [(3599, False), (3600, True)])
def test_a_node_lost_before_its_submit_again_and_again_asks_a_person_past_the_bound(lost_for, asks):
    expired = NOW - timedelta(seconds=1)
    first = expired - timedelta(seconds=lost_for)
    facts = node(
        PREPARING,
        dispatch_count=9,
        lease_owner="w1",
        lease_expires_at=expired,
        result={"lost_since": first.isoformat()},
    )

    outcome = lease_expired(facts, now=NOW, timing=replace(TIMING, wait_attention_seconds=3600))

    assert outcome.target == NS.READY  # never FAILED for it: nothing was sent
    assert outcome.fields["result"]["lost_since"] == first.isoformat()
    assert (outcome.attention is not None) == asks
    if asks:
        assert outcome.attention["reason"] == "stuck"
        assert "9 claims" in outcome.attention["message"]


def test_late_evidence_keeps_what_the_venue_said():
    assert evidence(Prepared({"a": 1}), None) == {"prepared": {"a": 1}}
    assert evidence(Submitted("tx", detail={"a": 1}), None) == {"external_ref": "tx", "a": 1}
    assert evidence(observation(ObservedStatus.PENDING), None) == {"status": "PENDING"}
    assert evidence(Recovery(RecoveredOutcome.FAILED), None) == {"outcome": "FAILED"}
    assert evidence(None, DeterministicError("no", evidence={"code": 4})) == {
        "error": "DeterministicError: no",
        "evidence": {"code": 4},
    }


# --- properties -------------------------------------------------------------------------------

details = st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4), max_size=3)
ERRORS = [
    DeterministicError,
    TransientError,
    VenueWait,
    AmbiguousError,
    RuntimeError,
    TimeoutError,
]
errors = st.builds(
    lambda cls, message: cls(message), st.sampled_from(ERRORS), st.text(max_size=3000)
)
refs = st.text(max_size=6)
ANSWERS = {
    "prepare": st.builds(Prepared, details),
    "sign": st.nothing(),
    "submit": st.builds(Submitted, refs, st.booleans(), details),
    "observe": st.builds(Observation, st.sampled_from(list(ObservedStatus)), refs, details),
    "recover": st.builds(Recovery, st.sampled_from(list(RecoveredOutcome)), refs, details),
}
timings = st.builds(
    Timing,
    lease_seconds=st.floats(1, 3600),
    poll_seconds=st.floats(0, 600),
    retry_base_seconds=st.floats(0, 60),
    retry_max_seconds=st.floats(0, 3600),
    max_dispatches=st.integers(1, 20),
    visibility_seconds=st.floats(0, 600),
    request_lifetime=st.none() | st.floats(0, 600),
)
nows = st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC))
moments = st.none() | nows


@st.composite
def steps(draw):
    """Any step a worker applies: a phase, a node in a state that step applies to, and what the
    venue answered or raised."""
    phase = draw(st.sampled_from(list(STEP_STATES)))
    facts = NodeFacts(
        state=draw(st.sampled_from(STEP_STATES[phase])),
        dispatch_count=draw(st.integers(0, 5000)),
        venue_errors=draw(st.integers(0, 30)),
        external_ref=draw(refs),
        result=draw(details),
        has_side_effect=draw(st.booleans()),
        submit_started_at=draw(moments),
        fenced_until=draw(moments),
    )
    answer = draw(st.none() | ANSWERS[phase])
    error = draw(errors) if answer is None else None
    return phase, facts, answer, error


@given(steps(), nows, timings)
def test_every_outcome_is_an_edge_of_the_node_table_from_the_state_it_applies_to(step, now, timing):
    phase, facts, answer, error = step

    outcome = decide(phase, facts, answer, error, now=now, timing=timing)

    assert outcome.target is None or can_transition_node_state(facts.state, outcome.target)
    assert "node_state" not in outcome.fields and "state_changed_at" not in outcome.fields


@given(steps(), nows, timings)
def test_nothing_that_may_have_left_the_building_goes_back_to_ready(step, now, timing):
    phase, facts, answer, error = step

    outcome = decide(phase, facts, answer, error, now=now, timing=timing)

    if phase in ("submit", "observe", "recover"):
        assert outcome.target != NS.READY


@given(steps(), nows, timings)
def test_before_submit_nothing_is_ever_unknown_and_a_refusal_always_fails(step, now, timing):
    phase, facts, answer, error = step
    if phase not in ("prepare", "sign"):
        return

    outcome = decide(phase, facts, answer, error, now=now, timing=timing)

    assert outcome.target != NS.UNKNOWN
    if isinstance(error, DeterministicError):
        assert outcome.target == NS.FAILED
    elif error is not None:
        give_up = not is_wait(error) and facts.venue_errors + 1 >= timing.max_dispatches
        assert outcome.target == (NS.FAILED if give_up else NS.READY)


@given(steps(), nows, timings)
def test_an_error_during_submit_fails_only_when_deterministic_and_is_unknown_otherwise(
    step, now, timing
):
    phase, facts, answer, error = step
    if phase != "submit" or error is None:
        return

    outcome = decide(phase, facts, answer, error, now=now, timing=timing)

    expected = NS.FAILED if isinstance(error, DeterministicError) else NS.UNKNOWN
    assert outcome.target == expected
    assert outcome.detail["ambiguous"] is (expected == NS.UNKNOWN)


@given(steps(), nows, timings)
def test_a_worker_lets_go_of_the_lease_unless_it_signs_next(step, now, timing):
    phase, facts, answer, error = step

    outcome = decide(phase, facts, answer, error, now=now, timing=timing)

    if outcome.target == NS.AWAITING_SIGNATURE:
        assert "lease_owner" not in outcome.fields
        assert outcome.fields["lease_expires_at"] == now + timedelta(seconds=timing.lease_seconds)
    else:
        assert outcome.fields["lease_owner"] == ""
        assert outcome.fields["lease_expires_at"] is None


@given(steps(), nows, timings)
def test_a_settled_node_is_always_followed_by_the_request_and_only_completion_advances(
    step, now, timing
):
    phase, facts, answer, error = step

    outcome = decide(phase, facts, answer, error, now=now, timing=timing)

    if outcome.target in TERMINAL_NODE_STATES or outcome.target == NS.UNKNOWN:
        assert outcome.then is not None
    assert (outcome.then is Then.ADVANCE) == (outcome.target == NS.COMPLETED)
    if outcome.pending:
        assert outcome.target in (None, NS.OBSERVING)


@given(steps(), nows, timings)
def test_the_next_attempt_is_never_in_the_past_nor_beyond_the_longest_wait(step, now, timing):
    phase, facts, answer, error = step

    outcome = decide(phase, facts, answer, error, now=now, timing=timing)

    retry_at = outcome.fields.get("next_attempt_at")
    if retry_at is not None:
        latest = now + timedelta(seconds=max(timing.retry_max_seconds, timing.poll_seconds))
        # Recovery may wait longer, but only until "not found" can first prove something.
        started = facts.submit_started_at or now
        latest = max(latest, started + timedelta(seconds=timing.visibility_seconds))
        if timing.request_lifetime is not None:
            fenced = facts.fenced_until or started
            latest = max(latest, fenced + timedelta(seconds=timing.request_lifetime))
        assert now <= retry_at <= latest
    assert len(outcome.fields.get("last_error", "")) <= 2000


@given(steps(), nows, timings)
def test_a_reorg_and_only_a_reorg_is_recorded_as_evidence_of_its_own(step, now, timing):
    phase, facts, answer, error = step

    outcome = decide(phase, facts, answer, error, now=now, timing=timing)

    reorg = isinstance(answer, Observation) and answer.status == ObservedStatus.REORG
    assert (outcome.record is not None) == reorg
    if reorg:
        assert outcome.record == {"reorg": answer.detail}


@given(
    st.sampled_from(list(REAPED)),
    st.integers(0, 5000),
    nows,
    timings,
)
def test_an_expired_lease_is_an_edge_and_never_sends_a_submit_back_to_ready(
    state, dispatches, now, timing
):
    facts = NodeFacts(state=state, dispatch_count=dispatches, lease_expires_at=now)

    outcome = lease_expired(facts, now=now, timing=timing)

    assert can_transition_node_state(state, outcome.target)
    assert outcome.target == (NS.UNKNOWN if state == NS.SUBMITTING else NS.READY)


@given(st.integers(0, 100_000), timings)
def test_backoff_grows_with_each_dispatch_and_stays_under_its_cap(count, timing):
    assert backoff(count, timing) <= backoff(count + 1, timing)
    assert backoff(count, timing) <= timedelta(seconds=timing.retry_max_seconds)


@given(steps(), nows, timings)
def test_absence_is_never_concluded_while_a_request_sent_may_still_take_effect(step, now, timing):
    phase, facts, answer, error = step
    if phase != "recover" or not isinstance(answer, Recovery) or not facts.has_side_effect:
        return
    if answer.outcome != RecoveredOutcome.NOT_FOUND:
        return

    outcome = decide(phase, facts, answer, error, now=now, timing=timing)

    if outcome.target == NS.FAILED:
        assert timing.request_lifetime is not None
        fenced = facts.fenced_until or facts.submit_started_at or now
        assert now >= fenced + timedelta(seconds=timing.request_lifetime)
        assert int(facts.result.get("not_found_answers", 0)) + 1 >= 2
        assert outcome.fields["last_error"].startswith("recovery")


def _recovering(**facts) -> NodeFacts:
    return node(NS.UNKNOWN, has_side_effect=True, **facts)


def test_not_found_is_no_proof_before_the_fenced_request_could_have_expired():
    fenced_until = NOW - timedelta(seconds=10)
    facts = _recovering(fenced_until=fenced_until, result={"not_found_answers": 3})
    timing = replace(TIMING, request_lifetime=30)

    outcome = decide(
        "recover", facts, Recovery(RecoveredOutcome.NOT_FOUND), None, now=NOW, timing=timing
    )

    assert outcome.target is None and outcome.pending
    assert outcome.fields["next_attempt_at"] == fenced_until + timedelta(seconds=30)


def test_not_found_after_the_request_lifetime_fails_the_node_with_a_true_reason():
    since = NOW - timedelta(seconds=45)
    facts = _recovering(
        fenced_until=NOW - timedelta(seconds=31),
        result={"not_found_answers": 2, "not_found_since": since.isoformat()},
    )
    timing = replace(TIMING, request_lifetime=30)
    answer = Recovery(RecoveredOutcome.NOT_FOUND, detail={"client_id": "qtg-1-w-1"})

    outcome = decide("recover", facts, answer, None, now=NOW, timing=timing)

    assert outcome.target == NS.FAILED
    assert outcome.fields["last_error"] == (
        "recovery: the venue has no trace of it (client_id=qtg-1-w-1) after 3 reads over 45 s"
    )


def test_an_unbounded_request_is_never_concluded_absent_and_asks_a_person():
    facts = _recovering(fenced_until=NOW - timedelta(days=30), result={"not_found_answers": 500})
    timing = replace(TIMING, request_lifetime=None)

    outcome = decide(
        "recover", facts, Recovery(RecoveredOutcome.NOT_FOUND), None, now=NOW, timing=timing
    )

    assert outcome.target is None
    assert outcome.attention["reason"] == "unprovable"
    assert outcome.fields["next_attempt_at"] > NOW


def test_a_venue_that_positively_reports_failure_is_believed_without_a_lifetime():
    facts = _recovering(result={"not_found_answers": 1})
    timing = replace(TIMING, request_lifetime=None)
    answer = Recovery(RecoveredOutcome.FAILED, detail={"finding": "reverted", "status": 0})

    outcome = decide("recover", facts, answer, None, now=NOW, timing=timing)

    assert outcome.target == NS.FAILED
    assert outcome.fields["last_error"].startswith("recovery: reverted (status=0)")

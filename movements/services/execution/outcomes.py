"""The rules that turn a venue's answer into a node transition: pure functions, no database.

A worker asks the venue with no transaction open; under the lock it reads the node's facts,
calls ``decide`` and writes the ``Outcome`` it gets. The error taxonomy of
``movements.executors.base`` maps onto the spec's edges:

- before submit (prepare, sign): a deterministic error -> FAILED; anything else -> READY with
  backoff, or FAILED once the budget of venue errors (``QTG_MAX_DISPATCHES``) is spent. The
  budget counts the venue's own refusals and failures only: a claim lost to a worker's death
  or a lease expiry, and a wait the venue asked for (a rate limit, maintenance:
  ``VenueWait``, or a ``TransientError`` with ``retry_after``), never count; a wait longer
  than ``QTG_WAIT_ATTENTION_SECONDS`` asks a person instead. Nothing has left the building,
  so nothing is ever UNKNOWN here.
- during submit: a deterministic error -> FAILED; any other error -> UNKNOWN (money may have
  moved: recovery finds out, the node is never submitted again blindly). An answer ->
  SUBMITTED (observed next), or COMPLETED when the venue's submit is terminal.
- observing: COMPLETED / FAILED / UNKNOWN as seen; a reorg is recorded with its evidence and
  goes to UNKNOWN; a transient error or a pending answer is polled again later.
- recovering an UNKNOWN node: SUBMITTED / COMPLETED / FAILED as the venue says; an error or an
  unanswerable question stays UNKNOWN, asked again with backoff. "Not found" (NOT_FOUND) is no
  proof that a side effect never happened: FAILED is concluded only once the executor's
  visibility window has passed since the submit began, the venue said so more than once, and
  the request's lifetime has passed since its fenced deadline (a paused worker may still send
  it until then); an executor that cannot bound that lifetime never concludes absence: the
  node stays UNKNOWN and a person is asked. A venue that refuses the question itself (a
  deterministic error) leaves the node UNKNOWN and asks a person to look.
- transient errors while watching back off exponentially with the node's error streak.
- a lease that expired: PREPARING / AWAITING_SIGNATURE -> READY, SUBMITTING -> UNKNOWN.

Every transition out of a worker's hands releases its lease, except AWAITING_SIGNATURE, which
the worker keeps (its lease extended) to sign next.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from movements.executors.base import (
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
from movements.states import NodeState

NS = NodeState

# The state a node is in when the answer of each step is applied (its lease still ours).
STEP_STATES: Mapping[str, tuple[NodeState, ...]] = {
    "prepare": (NS.PREPARING,),
    "sign": (NS.AWAITING_SIGNATURE,),
    "submit": (NS.SUBMITTING,),
    "observe": (NS.SUBMITTED, NS.OBSERVING),
    "recover": (NS.UNKNOWN,),
}

# What a node whose lease expired goes to: back to READY if nothing left the building, to
# UNKNOWN (reconciled by recovery) if it may have.
REAPED: Mapping[NodeState, NodeState] = {
    NS.PREPARING: NS.READY,
    NS.AWAITING_SIGNATURE: NS.READY,
    NS.SUBMITTING: NS.UNKNOWN,
}

OBSERVED_TARGETS: Mapping[ObservedStatus, NodeState] = {
    ObservedStatus.COMPLETED: NS.COMPLETED,
    ObservedStatus.FAILED: NS.FAILED,
    ObservedStatus.UNKNOWN: NS.UNKNOWN,
    ObservedStatus.REORG: NS.UNKNOWN,
}

RECOVERED_TARGETS: Mapping[RecoveredOutcome, NodeState] = {
    RecoveredOutcome.SUBMITTED: NS.SUBMITTED,
    RecoveredOutcome.COMPLETED: NS.COMPLETED,
    RecoveredOutcome.FAILED: NS.FAILED,
    RecoveredOutcome.NOT_FOUND: NS.FAILED,
}

LAST_ERROR_LENGTH = 2000


@dataclass(frozen=True)
class NodeFacts:
    """What the rules read of a node, as plain values."""

    state: NodeState
    dispatch_count: int = 0
    external_ref: str = ""
    result: Mapping[str, Any] = field(default_factory=dict)
    lease_owner: str = ""
    lease_expires_at: datetime | None = None
    has_side_effect: bool = False
    error_streak: int = 0
    submit_started_at: datetime | None = None
    venue_errors: int = 0
    fenced_until: datetime | None = None
    attempt: int = 1


@dataclass(frozen=True)
class Timing:
    """The settings the rules need, in seconds (``poll_seconds``: the executor's own, or the
    default)."""

    lease_seconds: float
    poll_seconds: float
    retry_base_seconds: float
    retry_max_seconds: float
    max_dispatches: int
    # The executor's: how long after a submit began its venue may still not show it.
    visibility_seconds: float = 0.0
    # The executor's: how long after its fenced deadline a request sent may still take
    # effect; None: unbounded (absence is never proof).
    request_lifetime: float | None = 0.0
    # How long a venue may keep a node waiting (rate limits, maintenance) before a person is
    # asked to look.
    wait_attention_seconds: float = 3600.0

    @classmethod
    def from_settings(
        cls,
        settings: Any,
        *,
        poll_seconds: float | None = None,
        visibility_seconds: float = 0.0,
        request_lifetime: float | None = 0.0,
    ) -> "Timing":
        """The numbers of the ``QTG_*`` execution settings (``settings``: Django's) and the
        executor's own."""
        return cls(
            lease_seconds=settings.QTG_LEASE_SECONDS,
            poll_seconds=poll_seconds or settings.QTG_OBSERVE_POLL_SECONDS,
            retry_base_seconds=settings.QTG_RETRY_BASE_SECONDS,
            retry_max_seconds=settings.QTG_RETRY_MAX_SECONDS,
            max_dispatches=settings.QTG_MAX_DISPATCHES,
            visibility_seconds=visibility_seconds,
            request_lifetime=request_lifetime,
            wait_attention_seconds=settings.QTG_WAIT_ATTENTION_SECONDS,
        )


class Then(StrEnum):
    """What follows a transition once it is written."""

    ADVANCE = "advance"  # the node completed: wake its successors, derive the request
    DERIVE = "derive"  # derive the request state from its nodes
    # The failed attempt never left (proven), and only a lost lease stopped it: a new attempt
    # takes its place, then the request is derived.
    RETRY = "retry"


# How many attempts of a node the workers make by themselves after a worker lost a submit
# that is then proven never to have happened (an operator's retry is not limited).
AUTO_ATTEMPTS = 3


@dataclass(frozen=True)
class Outcome:
    """A node's transition (``target``; None: bookkeeping only) with the node fields to set
    and save with it, in order, the evidence for its audit event (``detail``), what follows
    it, and evidence recorded as its own event before it (a reorg)."""

    target: NodeState | None
    fields: Mapping[str, Any]
    detail: Mapping[str, Any] = field(default_factory=dict)
    then: Then | None = None
    record: Mapping[str, Any] | None = None
    # The venue has no final answer yet (the node is polled again); reported as no new state.
    pending: bool = False
    # Something a person must look at (``movements.services.attention``): reason, message and
    # evidence.
    attention: Mapping[str, Any] | None = None


def error_detail(exc: BaseException) -> dict[str, Any]:
    """An error as evidence: its type and message, and the executor's evidence if any."""
    detail: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}"}
    evidence = getattr(exc, "evidence", None)
    if evidence:
        detail["evidence"] = evidence
    return detail


def evidence(answer: Any, error: BaseException | None) -> dict[str, Any]:
    """What the venue answered (or raised), as kept when the answer came too late to apply."""
    if answer is None:
        return error_detail(error)
    if isinstance(answer, Prepared):
        return {"prepared": answer.detail}
    if isinstance(answer, Submitted):
        return {"external_ref": answer.external_ref, **answer.detail}
    if isinstance(answer, Observation):
        return {"status": str(answer.status), **answer.detail}
    if isinstance(answer, Recovery):
        return {"outcome": str(answer.outcome), **answer.detail}
    raise TypeError(f"no evidence rule for {type(answer).__name__}")


def backoff(count: int, timing: Timing, error: BaseException | None = None) -> timedelta:
    """Exponential backoff after ``count`` dispatches, capped at ``retry_max_seconds``, and
    never shorter than the venue's own ``retry_after`` on a transient ``error``."""
    # 2.0 ** 1000 (not an int power) keeps a node asked thousands of times from overflowing.
    exponent = min(max(0, count - 1), 1000)
    seconds = min(timing.retry_base_seconds * 2.0**exponent, timing.retry_max_seconds)
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None and retry_after > seconds:
        seconds = float(retry_after)
    return timedelta(seconds=seconds)


def executor_attention(answer: Any, error: BaseException | None) -> Mapping[str, Any] | None:
    """What an executor asks a person to look at (``"attention"`` in its answer's detail or
    its error's evidence), with the whole answer as evidence; None when it asks nothing."""
    if error is not None:
        found = getattr(error, "evidence", None) or {}
    else:
        found = getattr(answer, "detail", None) or {}
    wanted = found.get("attention") if isinstance(found, Mapping) else None
    if not isinstance(wanted, Mapping) or not wanted.get("reason"):
        return None
    return {
        "reason": str(wanted["reason"]),
        "message": str(wanted.get("message") or wanted["reason"])[:1000],
        "evidence": evidence(answer, error),
    }


_RELEASED = {"lease_owner": "", "lease_expires_at": None}


def _merged(node: NodeFacts, detail: Mapping[str, Any]) -> Mapping[str, Any]:
    return {**(node.result or {}), **detail} if detail else node.result


def _last_error(detail: Mapping[str, Any]) -> str:
    return detail["error"][:LAST_ERROR_LENGTH]


def _then(target: NodeState) -> Then:
    return Then.ADVANCE if target == NS.COMPLETED else Then.DERIVE


def is_wait(error: BaseException | None) -> bool:
    """Whether ``error`` is the venue asking us to wait (not a failure of the attempt)."""
    if isinstance(error, VenueWait):
        return True
    return isinstance(error, TransientError) and error.retry_after is not None


def failed_before_submit(
    node: NodeFacts, error: BaseException, *, phase: str, now: datetime, timing: Timing
) -> Outcome:
    """Deterministic -> FAILED; a wait the venue asked for -> READY after it (never counted;
    past ``wait_attention_seconds`` a person is asked); any other error -> READY with backoff,
    counted as a venue error, or FAILED once ``max_dispatches`` venue errors were answered."""
    detail = {"phase": phase, **error_detail(error)}
    fields: dict[str, Any] = {**_RELEASED, "last_error": _last_error(detail)}
    attention = None
    if is_wait(error):
        waiting_since = (node.result or {}).get("waiting_since") or now.isoformat()
        fields["result"] = {**(node.result or {}), "waiting_since": waiting_since}
        waited = (now - datetime.fromisoformat(waiting_since)).total_seconds()
        detail["waiting_since"] = waiting_since
        if waited >= timing.wait_attention_seconds:
            attention = {
                "reason": "waiting_long",
                "message": f"{phase}: the venue has kept this node waiting for {waited:.0f} s "
                f"({detail['error'][:300]}); nothing was sent",
                "evidence": dict(detail),
            }
        count = node.dispatch_count
    else:
        count = node.venue_errors + 1
        fields["venue_errors"] = count
        detail["venue_errors"] = count
        if isinstance(error, DeterministicError) or count >= timing.max_dispatches:
            if not isinstance(error, DeterministicError):
                detail["gave_up_after_venue_errors"] = count
                fields["last_error"] = (
                    f"gave up after {count} venue errors at {phase}; the last: {detail['error']}"
                )[:LAST_ERROR_LENGTH]
            return Outcome(NS.FAILED, fields, detail, then=Then.DERIVE)
    retry_at = now + backoff(count, timing, error)
    detail["retry_at"] = retry_at.isoformat()
    # Derived again: a node back to READY no longer moves money, which may settle a movement
    # waiting on it (a sibling FAILED meanwhile).
    return Outcome(
        NS.READY,
        {**fields, "next_attempt_at": retry_at},
        detail,
        then=Then.DERIVE,
        attention=attention,
    )


def awaiting_signature(
    node: NodeFacts, prepared: Prepared, *, now: datetime, timing: Timing
) -> Outcome:
    """Prepared, to be signed next by the same worker: its lease is extended, not released."""
    fields = {
        "result": _merged(node, prepared.detail),
        "lease_expires_at": now + timedelta(seconds=timing.lease_seconds),
    }
    return Outcome(NS.AWAITING_SIGNATURE, fields, prepared.detail)


def before_submit(
    node: NodeFacts,
    answer: Prepared | None,
    error: BaseException | None,
    *,
    phase: str,
    now: datetime,
    timing: Timing,
) -> Outcome:
    """A prepare or sign step: its error (see ``failed_before_submit``), or a preparation
    that needs a signature (a signed payload is written by the SUBMITTING compare-and-set,
    never here)."""
    if error is not None:
        return failed_before_submit(node, error, phase=phase, now=now, timing=timing)
    if phase != "prepare" or not isinstance(answer, Prepared):
        raise ValueError(f"no transition for {type(answer).__name__} at {phase}")
    return awaiting_signature(node, answer, now=now, timing=timing)


def after_submit(
    node: NodeFacts,
    answer: Submitted | None,
    error: BaseException | None,
    *,
    now: datetime,
    timing: Timing,
) -> Outcome:
    """SUBMITTED (polled next) or COMPLETED when the venue's submit is terminal. An error:
    deterministic, the venue refused and nothing happened -> FAILED; anything else is
    ambiguous (money may have moved) -> UNKNOWN, for recovery to find out."""
    if answer is not None:
        target = NS.COMPLETED if answer.done else NS.SUBMITTED
        fields = dict(_RELEASED)
        if target == NS.SUBMITTED:
            fields["next_attempt_at"] = now + timedelta(seconds=timing.poll_seconds)
        fields |= {"external_ref": answer.external_ref, "result": _merged(node, answer.detail)}
        detail = {"external_ref": answer.external_ref, **answer.detail}
        then = None if target == NS.SUBMITTED else Then.ADVANCE
        return Outcome(target, fields, detail, then=then)
    failure = error_detail(error)
    target = NS.FAILED if isinstance(error, DeterministicError) else NS.UNKNOWN
    fields = {**_RELEASED, "last_error": _last_error(failure), "next_attempt_at": now}
    if node.fenced_until is not None and node.fenced_until > now:
        # The call is over: this process sends nothing more. What the venue may still do
        # with a request it got counts (its lifetime) from now, not from the call's timeout.
        fields["fenced_until"] = now
    detail = {"phase": "submit", "ambiguous": target == NS.UNKNOWN, **failure}
    return Outcome(target, fields, detail, then=Then.DERIVE)


def observed(
    node: NodeFacts,
    answer: Observation | None,
    error: BaseException | None,
    *,
    now: datetime,
    timing: Timing,
) -> Outcome:
    """COMPLETED, FAILED, UNKNOWN (ambiguous, or a reorg: recorded with its evidence first),
    or still pending (polled again later; a SUBMITTED node moves on to OBSERVING)."""
    if answer is None:
        detail = {"phase": "observe", **error_detail(error)}
        fields = {**_RELEASED, "last_error": _last_error(detail)}
        if isinstance(error, TransientError):
            streak = node.error_streak + 1
            retry_at = now + backoff(streak, timing, error)
            fields |= {"next_attempt_at": retry_at, "error_streak": streak}
            return Outcome(None, fields, pending=True)
        target = NS.FAILED if isinstance(error, DeterministicError) else NS.UNKNOWN
        return Outcome(target, {**fields, "next_attempt_at": now}, detail, then=Then.DERIVE)
    external_ref = node.external_ref or answer.external_ref
    replaced = (
        answer.replaced
        and answer.status == ObservedStatus.COMPLETED
        and answer.external_ref
        and answer.external_ref != node.external_ref
    )
    if replaced:
        # What settled is not what was first submitted (a fee-bump replacement won): the
        # nodes after this one need the reference that happened.
        external_ref = answer.external_ref
    fields = {**_RELEASED, "result": _merged(node, answer.detail), "external_ref": external_ref}
    if node.error_streak:
        fields["error_streak"] = 0
    target = OBSERVED_TARGETS.get(answer.status)
    if target is None:  # still pending
        fields["next_attempt_at"] = now + timedelta(seconds=timing.poll_seconds)
        moving = node.state == NS.SUBMITTED
        return Outcome(
            NS.OBSERVING if moving else None,
            fields,
            answer.detail if moving else {},
            pending=True,
        )
    if target == NS.UNKNOWN:
        fields["next_attempt_at"] = now
    if target in (NS.FAILED, NS.UNKNOWN):
        fields["last_error"] = _answer_summary(f"observed {answer.status}", answer.detail)
    reorg = {"reorg": answer.detail} if answer.status == ObservedStatus.REORG else None
    detail = {"observed": str(answer.status), **answer.detail}
    if replaced and node.external_ref:
        detail["replaced_external_ref"] = node.external_ref
    return Outcome(target, fields, detail, then=_then(target), record=reorg)


def recovered(
    node: NodeFacts,
    answer: Recovery | None,
    error: BaseException | None,
    *,
    now: datetime,
    timing: Timing,
) -> Outcome:
    """SUBMITTED, COMPLETED or FAILED as the venue says; an error or an unanswerable question
    leaves the node UNKNOWN, to be asked again after a backoff."""
    target = RECOVERED_TARGETS.get(answer.outcome) if answer is not None else None
    if (
        target == NS.FAILED
        and node.has_side_effect
        and (wait := _not_yet_proven(node, answer, now=now, timing=timing)) is not None
    ):
        return wait
    if target is None:
        dispatches = node.dispatch_count + 1
        fields = {
            **_RELEASED,
            "next_attempt_at": now + backoff(dispatches, timing, error),
            "dispatch_count": dispatches,
        }
        if error is not None:
            fields["last_error"] = _last_error(error_detail(error))
        if isinstance(error, DeterministicError):
            # The venue refuses the question itself: asking again will not settle it.
            fields["next_attempt_at"] = now + timedelta(seconds=timing.retry_max_seconds)
            return Outcome(
                None,
                fields,
                attention={
                    "reason": "recovery_blocked",
                    "message": "recovery cannot ask the venue about this node "
                    f"({error_detail(error)['error'][:300]}): settle it by hand with evidence",
                    "evidence": {"phase": "recover", **error_detail(error)},
                },
            )
        return Outcome(None, fields)
    fields = dict(_RELEASED)
    if target == NS.SUBMITTED:
        fields["next_attempt_at"] = now
    fields |= {
        "external_ref": answer.external_ref or node.external_ref,
        "result": _merged(node, answer.detail),
    }
    detail = {"resolution": "recovery", **answer.detail}
    then = _then(target)
    if target == NS.FAILED:
        fields["last_error"] = _recovery_reason(node, answer, now)
        lost_by_us = (node.result or {}).get("lease_lost") and node.has_side_effect
        absent = answer.outcome == RecoveredOutcome.NOT_FOUND
        if absent and lost_by_us and node.attempt < AUTO_ATTEMPTS:
            # Nothing reached the venue, and no venue said no: a worker died or paused.
            then = Then.RETRY
            detail["retried"] = f"attempt {node.attempt + 1} takes its place"
    return Outcome(target, fields, detail, then=then)


def _answer_summary(prefix: str, detail: Mapping[str, Any]) -> str:
    """A venue answer as a reason a person can read: what it found, and its evidence."""
    finding = detail.get("finding") or detail.get("reason") or detail.get("error") or ""
    rest = {k: v for k, v in detail.items() if k not in ("finding", "reason", "error")}
    text = f"{prefix}: {finding}" if finding else prefix
    if rest:
        text += f" ({', '.join(f'{k}={v}' for k, v in list(rest.items())[:8])})"
    return text[:LAST_ERROR_LENGTH]


def _recovery_reason(node: NodeFacts, answer: Recovery, now: datetime) -> str:
    """Why recovery concluded FAILED, with how many answers over how long it took."""
    result = node.result or {}
    reads = int(result.get("not_found_answers", 0)) + 1
    since = result.get("not_found_since")
    span = (now - datetime.fromisoformat(since)).total_seconds() if since else 0.0
    what = "the venue has no trace of it" if answer.outcome == RecoveredOutcome.NOT_FOUND else ""
    summary = _answer_summary("recovery", {"finding": what, **answer.detail})
    if answer.outcome == RecoveredOutcome.NOT_FOUND or since:
        summary += f" after {reads} reads over {span:.0f} s"
    return summary[:LAST_ERROR_LENGTH]


# How many "not found" answers recovery needs before a side effect counts as never happened.
NOT_FOUND_ANSWERS = 2


def _not_yet_proven(
    node: NodeFacts, answer: Recovery, *, now: datetime, timing: Timing
) -> Outcome | None:
    """A venue that says it has no trace of a side effect proves nothing until its visibility
    window has passed since the submit began, and it said so more than once: until then the
    node stays UNKNOWN and is asked again (None: the finding stands)."""
    seen = int((node.result or {}).get("not_found_answers", 0)) + 1
    since = (node.result or {}).get("not_found_since") or now.isoformat()
    visible_from = (node.submit_started_at or now) + timedelta(seconds=timing.visibility_seconds)
    absence = answer.outcome == RecoveredOutcome.NOT_FOUND
    provable_from = visible_from
    if absence and timing.request_lifetime is not None:
        fenced = node.fenced_until or node.submit_started_at or now
        provable_from = max(visible_from, fenced + timedelta(seconds=timing.request_lifetime))
    unbounded = absence and timing.request_lifetime is None
    if not unbounded and seen >= NOT_FOUND_ANSWERS and now >= provable_from:
        return None
    result = {
        **(node.result or {}),
        "not_found_answers": seen,
        "not_found_since": since,
        **answer.detail,
    }
    if unbounded:
        # Nothing bounds when a request already sent may still take effect: absence is never
        # proof. Asked again (a later sighting settles it), and a person once it is visible.
        ask_at = now + backoff(seen, timing)
        fields = {**_RELEASED, "next_attempt_at": ask_at, "result": result}
        attention = None
        if now >= visible_from:
            attention = {
                "reason": "unprovable",
                "message": "the venue has no trace of this side effect, but nothing bounds "
                "when a request already sent may still take effect: check the venue and "
                "settle the node by hand with evidence (a later sighting settles it too)",
                "evidence": {"phase": "recover", "not_found_answers": seen, **answer.detail},
            }
        return Outcome(None, fields, pending=True, attention=attention)
    ask_at = max(provable_from, now + backoff(seen, timing))
    fields = {**_RELEASED, "next_attempt_at": ask_at, "result": result}
    return Outcome(None, fields, pending=True)


def contradicts_failure(phase: str, answer: Any) -> bool:
    """Whether a venue answer says the side effect did happen (or is still happening): what a
    late answer must not say about a node already concluded FAILED."""
    if isinstance(answer, Submitted):
        return True
    if isinstance(answer, Observation):
        return answer.status in (ObservedStatus.COMPLETED, ObservedStatus.PENDING)
    if isinstance(answer, Recovery):
        return answer.outcome in (RecoveredOutcome.COMPLETED, RecoveredOutcome.SUBMITTED)
    return False


def lease_expired(node: NodeFacts, *, now: datetime, timing: Timing) -> Outcome:
    """A node whose worker stopped renewing its lease (see ``REAPED``)."""
    target = REAPED[node.state]
    expired_at = node.lease_expires_at.isoformat() if node.lease_expires_at else None
    detail = {
        "reason": "lease expired",
        "lease_owner": node.lease_owner,
        "lease_expired_at": expired_at,
    }
    retry_at = now + backoff(node.dispatch_count, timing) if target == NS.READY else now
    # Not a venue error (nothing counts against the budget): the worker stopped renewing.
    why = f"the lease of worker {node.lease_owner} expired at {expired_at} during {node.state}"
    if target == NS.UNKNOWN:
        why += ": the submit may have left; recovery asks the venue"
    fields = {**_RELEASED, "next_attempt_at": retry_at, "last_error": why[:LAST_ERROR_LENGTH]}
    attention = None
    if target == NS.UNKNOWN:
        fields["result"] = {**(node.result or {}), "lease_lost": True}
    else:
        # Lost before its submit, again and again (its workers keep dying on it): never
        # FAILED for that, but past the long bound a person is asked, once.
        lost_since = (node.result or {}).get("lost_since") or expired_at or now.isoformat()
        fields["result"] = {**(node.result or {}), "lost_since": lost_since}
        # From the first loss to this one (how late a reaper came adds nothing).
        lost = ((node.lease_expires_at or now) - datetime.fromisoformat(lost_since)).total_seconds()
        detail["lost_since"] = lost_since
        if lost >= timing.wait_attention_seconds:
            attention = {
                "reason": "stuck",
                "message": f"workers have lost this node before its submit since {lost_since} "
                f"({lost:.0f} s, {node.dispatch_count} claims; the last: {why}); nothing was "
                "sent: find out why its workers die",
                "evidence": dict(detail),
            }
    # Derived again either way: UNKNOWN may need a person, and a node back to READY no longer
    # moves money, which may settle a movement waiting on it (a sibling FAILED meanwhile).
    return Outcome(target, fields, detail, then=Then.DERIVE, attention=attention)


AFTER_SUBMIT_RULES = {"submit": after_submit, "observe": observed, "recover": recovered}


def decide(
    phase: str,
    node: NodeFacts,
    answer: Any,
    error: BaseException | None,
    *,
    now: datetime,
    timing: Timing,
) -> Outcome:
    """The outcome of the venue's ``answer`` (or its ``error``) at ``phase`` (a key of
    ``STEP_STATES``) for ``node``."""
    if phase in ("prepare", "sign"):
        outcome = before_submit(node, answer, error, phase=phase, now=now, timing=timing)
    else:
        outcome = AFTER_SUBMIT_RULES[phase](node, answer, error, now=now, timing=timing)
    if outcome.attention is None and (asked := executor_attention(answer, error)) is not None:
        outcome = replace(outcome, attention=asked)
    return outcome

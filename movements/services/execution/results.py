"""Result transactions: what the venues answered, applied to the nodes of a batch together.

The results of a batch of claims are applied in one transaction that re-locks the requests and
then their nodes (the house lock order), applies each result only if its lease is still ours,
and writes every change in one batch (``state.batch``): nodes of one request in one batch see
each other's new state. A result that arrives after the lease was reaped is recorded as
evidence and otherwise ignored: recovery owns the node. If applying any result raises, the
batch is rolled back and every result is applied again in a transaction of its own, so one bad
result never costs the others.

Applying a result is: lock, ``outcomes.decide`` (pure), write. Results are held until the batch
is done, or written sooner once ``QTG_RESULT_WRITE_SECONDS`` have gone by since the last
write, so a slow venue never leaves a known result unwritten for long (``Unwritten``). A
submit's result is held only where losing it cannot need a person: a node whose answer is
known but unwritten is SUBMITTING, and a worker's death turns it UNKNOWN (``runs``).
"""

import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef
from django.utils import timezone

from movements import ports
from movements.models import AttentionReason, MovementEvent, MovementRequest, MovementRequestNode
from movements.selectors import audit_head, rows_held, with_rows_for_payload
from movements.services.attention import attention_raise
from movements.services.execution.claims import Claim, worker_actor
from movements.services.execution.outcomes import (
    STEP_STATES,
    NodeFacts,
    Outcome,
    Then,
    Timing,
    contradicts_failure,
    decide,
    evidence,
)
from movements.services.progress import (
    advance_after_completion,
    apply_request_state_from_nodes,
    new_attempt,
)
from movements.services.state import batch, record_event, save_fields, set_node_state
from movements.services.writers import RowWriter
from movements.states import NodeState
from qtg.core.actors import Actor
from qtg.core.chain import GENESIS, heads_known
from qtg.core.compiled import Compiled

logger = logging.getLogger(__name__)


@dataclass
class Locked:
    """A claimed node under its row lock, with its request and every current node of it."""

    request: MovementRequest
    node: MovementRequestNode
    nodes: list[MovementRequestNode]


@dataclass
class Result:
    """What the venue answered (or raised) at ``phase`` for a claimed node: applied under the
    lock if the lease is still ours, otherwise kept as evidence of a late result."""

    claim: Claim
    phase: str
    answer: Any = None
    error: BaseException | None = None
    applied: bool = False
    value: NodeState | None = None


def _lock_requests(*, requests: list[Any]):
    return (
        with_rows_for_payload(MovementRequest.objects.all())
        .select_for_update(of=("self",), no_key=True)
        .filter(pk__in=requests)
        .order_by("pk")
    )


def _lock_nodes(*, requests: list[Any]):
    # Each node carries its movement's audit head (the link of its newest event) and the
    # number of its newest callback event, read after the movement's lock was taken: what the
    # events written under that lock chain to (``heads_known``) and are numbered after
    # (``sequences_known``), without queries of their own.
    return (
        MovementRequestNode.objects.current()
        .filter(request_id__in=requests)
        .select_related("plan_node")
        .select_for_update(of=("self",), no_key=True)
        .annotate(
            audit_head=audit_head("request_id"),
            last_event_sequence=ports.callbacks().last_sequence(OuterRef("request_id")),
        )
        .order_by("request_id", "plan_node__position", "pk")
    )


# Every result transaction sends both (``qtg.core.compiled``).
_LOCK_REQUESTS = Compiled(_lock_requests, requests=MovementRequest._meta.pk)
_LOCK_NODES = Compiled(_lock_nodes, requests=MovementRequestNode._meta.get_field("request"))


def _lock_claimed(claims: list[Claim]) -> dict[int, Locked]:
    request_ids = sorted({claim.request_id for claim in claims}, key=str)
    requests = {request.pk: request for request in _LOCK_REQUESTS(requests=request_ids)}
    nodes = _LOCK_NODES(requests=request_ids)
    by_request: dict[Any, list[MovementRequestNode]] = {pk: [] for pk in requests}
    for node in nodes:
        node.request = requests[node.request_id]
        by_request[node.request_id].append(node)
    by_pk = {node.pk: node for node in nodes}
    return {
        claim.node_id: Locked(requests[claim.request_id], node, by_request[claim.request_id])
        for claim in claims
        if (node := by_pk.get(claim.node_id)) is not None
    }


def _lease_problem(claim: Claim, locked: Locked | None, expected: tuple) -> str | None:
    if locked is None:
        return f"node {claim.node_id} is no longer the current attempt"
    node = locked.node
    if (
        node.lease_owner != claim.owner
        or node.lease_epoch != claim.epoch
        or node.node_state not in expected
    ):
        return (
            f"node {node.node_key} is {node.node_state}, lease {node.lease_owner!r} epoch "
            f"{node.lease_epoch} (this result was for epoch {claim.epoch})"
        )
    return None


def node_facts(node: MovementRequestNode) -> NodeFacts:
    return NodeFacts(
        state=NodeState(node.node_state),
        dispatch_count=node.dispatch_count,
        external_ref=node.external_ref,
        result=node.result,
        lease_owner=node.lease_owner,
        lease_expires_at=node.lease_expires_at,
        has_side_effect=node.has_side_effect,
        error_streak=node.error_streak,
        submit_started_at=node.submit_started_at,
        venue_errors=node.venue_errors,
        fenced_until=node.fenced_until,
        attempt=node.attempt,
    )


def write_outcome(locked: Locked, outcome: Outcome, actor: Actor, writer: RowWriter) -> None:
    """Write ``outcome`` to the locked node (and what follows it: frontier, request state)."""
    node = locked.node
    for name, value in outcome.fields.items():
        setattr(node, name, value)
    if outcome.record is not None:
        detail = dict(outcome.record)
        record_event(request=locked.request, node=node, actor=actor, detail=detail, writer=writer)
    if outcome.attention is not None:
        attention_raise(
            request=locked.request,
            node=node,
            reason=outcome.attention["reason"],
            message=outcome.attention["message"],
            evidence=dict(outcome.attention.get("evidence") or {}),
            since=timezone.now(),
            actor=actor,
            writer=writer,
        )
    if outcome.target is None:
        save_fields(node, outcome.fields, writer=writer)
    else:
        set_node_state(
            node=node,
            new_state=outcome.target,
            actor=actor,
            detail=dict(outcome.detail),
            update_fields=outcome.fields,
            writer=writer,
        )
    if outcome.then is Then.ADVANCE:
        advance_after_completion(locked.request, node, locked.nodes, actor=actor, writer=writer)
    elif outcome.then is Then.DERIVE:
        apply_request_state_from_nodes(locked.request, locked.nodes, actor=actor, writer=writer)
    elif outcome.then is Then.RETRY:
        nodes = new_attempt(
            locked.request,
            node,
            locked.nodes,
            actor=actor,
            reason=f"recovery proved attempt {node.attempt} never reached the venue after its "
            "worker lost the lease",
            writer=writer,
        )
        locked.nodes[:] = nodes
        apply_request_state_from_nodes(locked.request, nodes, actor=actor, writer=writer)


def _apply(result: Result, locked: Locked, writer: RowWriter) -> NodeState | None:
    claim = result.claim
    timing = Timing.from_settings(
        settings,
        poll_seconds=claim.executor.poll_seconds,
        visibility_seconds=claim.executor.visibility_window(claim.context),
        request_lifetime=claim.executor.request_lifetime(claim.context),
    )
    outcome = decide(
        result.phase,
        node_facts(locked.node),
        result.answer,
        result.error,
        now=timezone.now(),
        timing=timing,
    )
    write_outcome(locked, outcome, worker_actor(claim.owner, claim.epoch), writer)
    return None if outcome.pending else outcome.target


def apply_results(results: list[Result]) -> None:
    """Apply ``results`` in one transaction (see above); late ones are kept as evidence."""
    if not results:
        return
    late: list[tuple[Result, str]] = []
    try:
        with transaction.atomic(), ports.callbacks().read_once():
            locked = _lock_claimed([result.claim for result in results])
            held = {entry.request.pk: entry.nodes for entry in locked.values()}
            heads = {pk: nodes[0].audit_head or GENESIS for pk, nodes in held.items() if nodes}
            ports.callbacks().sequences_known(
                {pk: nodes[0].last_event_sequence for pk, nodes in held.items() if nodes}
            )
            # The callback events these results cause show each movement from the rows held
            # here, as written (``selectors.rows_held``), instead of reading it again.
            with heads_known({MovementEvent: heads}), rows_held(held), batch() as writes:
                _apply_locked(results, locked, writes, late)
    except Exception:
        if len(results) == 1:
            raise
        logger.exception("applying a batch of %s results failed; applying one by one", len(results))
        errors = []
        for result in results:
            result.applied, result.value = False, None
            try:
                apply_results([result])
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0] from None
        return
    for result, problem in late:
        late_result(
            result.claim,
            result.phase,
            evidence(result.answer, result.error),
            problem,
            contradicts_failure=contradicts_failure(result.phase, result.answer),
        )


def _apply_locked(
    results: list[Result],
    locked: dict[int, Locked],
    writes: RowWriter,
    late: list[tuple[Result, str]],
) -> None:
    for result in results:
        target = locked.get(result.claim.node_id)
        problem = _lease_problem(result.claim, target, STEP_STATES[result.phase])
        if problem is not None:
            late.append((result, problem))
            continue
        result.value = _apply(result, target, writes)
        result.applied = True
        result.claim.node = target.node


class Unwritten:
    """Results a worker holds until it writes them, together, in one transaction: when its
    batch is done, or sooner once ``QTG_RESULT_WRITE_SECONDS`` have gone by since the last
    write, so a slow venue never leaves a known result unwritten for long."""

    def __init__(
        self,
        results: list[Result] | None = None,
        *,
        batch_size: int = 0,
    ) -> None:
        self.results = list(results or [])
        self.seen = list(self.results)
        self.written_at = time.monotonic()
        # A batch of one or two writes each result as it comes (holding saves next to no
        # transaction); a larger one holds them for one transaction. A write costs about as
        # much as a whole sandbox node (lock the movements, derive, callbacks, audit chain),
        # so holding also brings the batch's last result, its slowest, in sooner.
        self.at_once = batch_size <= settings.QTG_RESULT_WRITE_AT_ONCE_BELOW

    def add(self, result: Result, *, at_once: bool = False) -> None:
        """Hold ``result`` (written with those held before it now when ``at_once``)."""
        self.results.append(result)
        self.seen.append(result)
        waited = time.monotonic() - self.written_at
        if at_once or self.at_once or waited >= settings.QTG_RESULT_WRITE_SECONDS:
            self.write()

    def holds(self, request_id: Any) -> bool:
        """Whether a result of ``request_id``'s nodes is waiting to be written."""
        return any(result.claim.request_id == request_id for result in self.results)

    def write(self) -> None:
        results, self.results = self.results, []
        apply_results(results)
        self.written_at = time.monotonic()


def late_result(
    claim: Claim,
    phase: str,
    outcome: dict[str, Any],
    reason: str,
    *,
    contradicts_failure: bool = False,
) -> None:
    """Keep the evidence of a result that came too late to be applied. One that says a side
    effect happened, for a node already concluded FAILED, needs a person: attention."""
    with transaction.atomic():
        request = MovementRequest.objects.select_for_update(no_key=True).get(pk=claim.request_id)
        node = MovementRequestNode.objects.get(pk=claim.node_id)
        node.request = request
        actor = worker_actor(claim.owner, claim.epoch)
        record_event(
            request=request,
            node=node,
            actor=actor,
            detail={"late_result": phase, "outcome": outcome, "reason": reason},
        )
        if contradicts_failure and node.node_state == NodeState.FAILED and node.has_side_effect:
            attention_raise(
                request=request,
                node=node,
                reason=AttentionReason.LATE_RESULT,
                message=f"{node.node_key} was concluded FAILED, but the venue's late {phase} "
                f"answer says it happened: check the venue and settle the movement by hand",
                evidence={"late_result": phase, "outcome": outcome},
                since=timezone.now(),
                actor=actor,
            )
    logger.warning("late %s result for node %s dropped: %s", phase, claim.node_id, reason)

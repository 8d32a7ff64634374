"""The worker services: claim nodes, call their executors outside any transaction, and map
what the executors returned or raised onto the spec's node transitions.

A worker works a batch at a time (``QTG_CLAIM_BATCH`` nodes), each step in short pieces:

1. a claim transaction: lock the due nodes together with their requests, in one statement,
   with ``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL (a worker never waits for a lock it
   does not hold yet), give them a lease and move them (READY -> PREPARING/OBSERVING);
2. the executor calls, one node after another, with no transaction open and no lock held
   (leases of the nodes still waiting are renewed as the batch goes);
3. result transactions that re-lock the requests and then their nodes (the house lock order)
   and apply each result only if its lease is still ours. A result that arrives after the
   lease was reaped is recorded as evidence and otherwise ignored: recovery owns the node.
   Results are written together when the batch is done, or sooner on a slow venue.

The one exception is SUBMITTING, which a node enters alone, right before its own submit, by a
compare-and-set on its state and lease: one statement, which holds no other lock meanwhile.

Movement rows are locked FOR NO KEY UPDATE (their keys never change): writers still queue on a
row, but inserting the audit events and other rows that reference it never waits for one, so
such a statement cannot close a lock cycle.

Exactly once: the idempotency key of an attempt is persisted when the node is claimed, before
anything is submitted, and sent to the venue; a signed payload is persisted in the same
statement that moves the node to SUBMITTING, and is re-used (never re-signed) by any later
attempt or recovery. A node whose worker died in SUBMITTING becomes UNKNOWN when its lease
expires and is reconciled through ``recover``, never submitted again.

On SQLite (embedded) there are no row locks: transactions are IMMEDIATE, so writers queue.
"""

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from movements import interface
from movements.executors import get_executor
from movements.executors.base import (
    DeterministicError,
    ExecutionContext,
    Executor,
    Observation,
    ObservedStatus,
    Prepared,
    RecoveredOutcome,
    Recovery,
    Submitted,
    TransientError,
    Upstream,
)
from movements.models import MovementRequest, MovementRequestNode, NodeKind
from movements.services.progress import advance_after_completion, apply_request_state_from_nodes
from movements.services.state import (
    deferred_writes,
    record_event,
    save_fields,
    set_node_state,
    set_request_state,
)
from movements.states import IN_FLIGHT_NODE_STATES, NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import StaleState

logger = logging.getLogger(__name__)

NS = NodeState
RS = RequestState

# READY nodes are dispatched only for these requests (never before approval, never after).
DISPATCH_REQUEST_STATES = (RS.APPROVED, RS.EXECUTING)
# Observation and recovery continue while money may be in flight, including in
# MANUAL_INTERVENTION: nothing with money in flight is auto-terminalized.
WATCH_REQUEST_STATES = (RS.EXECUTING, RS.WAITING_MANUAL_ACTION, RS.MANUAL_INTERVENTION)

LEASE_FIELDS = ["lease_owner", "lease_expires_at", "heartbeat_at"]


def worker_identity() -> str:
    """host:pid:random, unique per process (and per fork)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _actor(owner: str) -> Actor:
    return Actor.system(f"worker:{owner}"[:128])


def _lease_until() -> Any:
    return timezone.now() + timedelta(seconds=settings.QTG_LEASE_SECONDS)


def _backoff(count: int) -> timedelta:
    seconds = settings.QTG_RETRY_BASE_SECONDS * (2 ** max(0, count - 1))
    return timedelta(seconds=min(seconds, settings.QTG_RETRY_MAX_SECONDS))


def _poll_after(executor: Executor) -> Any:
    seconds = executor.poll_seconds or settings.QTG_OBSERVE_POLL_SECONDS
    return timezone.now() + timedelta(seconds=seconds)


def attempt_idempotency_key(node: MovementRequestNode) -> str:
    """One key per side-effecting attempt (a retried node is a new attempt, a new key)."""
    return f"qtg-{node.request_id}-{node.node_key}-{node.attempt}"


@dataclass
class Claim:
    """A node this worker holds the lease of, with what the executor needs to know."""

    node_id: int
    request_id: Any
    owner: str
    state: NodeState
    kind: str
    signing_required: bool
    executor: Executor
    context: ExecutionContext
    # The node as this worker last wrote it (with its request): what a lock-free
    # compare-and-set transition starts from.
    node: MovementRequestNode


# --- claiming ---------------------------------------------------------------------------------


def _due(now: Any) -> Q:
    return Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)


def _lease_free(now: Any) -> Q:
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)


def _claimable(states: tuple, request_states: tuple, now: Any):
    return (
        MovementRequestNode.objects.current()
        .filter(node_state__in=states, request__request_state__in=request_states)
        .filter(_due(now), _lease_free(now))
        .exclude(kind=NodeKind.MANUAL_GATE)
        .select_related("request", "plan_node")
        # The request row is locked in the same statement as the node, and skipped if anyone
        # holds either: a worker holding a node lock never waits for its request's lock.
        .select_for_update(skip_locked=True, of=("self", "request"), no_key=True)
        .order_by("next_attempt_at", "id")
    )


def _upstream(nodes: list[MovementRequestNode]) -> dict[Any, dict[str, Upstream]]:
    """What the executors that look upstream need: the other current nodes of their requests,
    read with one query for the whole batch."""
    request_ids = {node.request_id for node in nodes if get_executor(node.executor).needs_upstream}
    upstream: dict[Any, dict[str, Upstream]] = {pk: {} for pk in request_ids}
    if not request_ids:
        return upstream
    rows = (
        MovementRequestNode.objects.current()
        .filter(request_id__in=request_ids)
        .values_list("request_id", "node_key", "executor", "node_state", "external_ref", "result")
        .annotate(config=F("plan_node__config"))
    )
    for request_id, key, executor, state, external_ref, result, config in rows:
        upstream[request_id][key] = Upstream(
            executor=executor,
            state=state,
            external_ref=external_ref,
            result=dict(result or {}),
            config=dict(config or {}),
        )
    return upstream


def _context(node: MovementRequestNode, upstream: dict[str, Upstream]) -> ExecutionContext:
    request = node.request
    return ExecutionContext(
        request_id=str(request.pk),
        node_id=node.pk,
        node_key=node.node_key,
        attempt=node.attempt,
        asset=request.asset,
        amount=request.amount,
        source=request.source,
        destination=request.destination,
        config=dict(node.plan_node.config or {}),
        params=dict(request.params or {}),
        idempotency_key=node.idempotency_key,
        signed_payload=node.signed_payload,
        external_ref=node.external_ref,
        result=dict(node.result or {}),
        upstream={k: v for k, v in upstream.items() if k != node.node_key},
    )


def _take_lease(node: MovementRequestNode, owner: str) -> None:
    now = timezone.now()
    node.lease_owner = owner
    node.lease_expires_at = now + timedelta(seconds=settings.QTG_LEASE_SECONDS)
    node.heartbeat_at = now


def _make_claims(nodes: list[MovementRequestNode], owner: str) -> list[Claim]:
    upstream = _upstream(nodes)
    return [
        Claim(
            node_id=node.pk,
            request_id=node.request_id,
            owner=owner,
            state=NodeState(node.node_state),
            kind=node.kind,
            signing_required=node.signing_required,
            executor=get_executor(node.executor),
            context=_context(node, upstream.get(node.request_id, {})),
            node=node,
        )
        for node in nodes
    ]


def _lock_batch(states: tuple, request_states: tuple, as_of: Any, limit: int) -> list:
    """Lock up to ``limit`` due nodes (and their requests) in one statement. Nodes of the same
    request share one request instance, so a request transition is seen by all of them."""
    nodes = list(_claimable(states, request_states, as_of or timezone.now())[: max(1, limit)])
    requests: dict[Any, MovementRequest] = {}
    for node in nodes:
        node.request = requests.setdefault(node.request_id, node.request)
    return nodes


@transaction.atomic
def claim_ready_nodes(*, owner: str, as_of: Any = None, limit: int = 1) -> list[Claim]:
    """Claim up to ``limit`` due READY nodes of APPROVED/EXECUTING requests in one transaction:
    READY -> PREPARING for an action, READY -> OBSERVING for an observe node. The first
    dispatch of a request moves it APPROVED -> EXECUTING. Manual gates are never dispatched
    (an operator releases them)."""
    nodes = _lock_batch((NS.READY,), DISPATCH_REQUEST_STATES, as_of, limit)
    actor = _actor(owner)
    with deferred_writes():
        _claim_locked(nodes, owner, actor)
    return _make_claims(nodes, owner)


def _claim_locked(nodes: list[MovementRequestNode], owner: str, actor: Actor) -> None:
    for node in nodes:
        request = node.request
        if request.request_state == RS.APPROVED:
            set_request_state(
                request=request,
                new_state=RS.EXECUTING,
                actor=actor,
                nodes=[],
                detail={"first_dispatch": node.node_key},
            )
        _take_lease(node, owner)
        node.dispatch_count += 1
        node.next_attempt_at = None
        fields = [*LEASE_FIELDS, "dispatch_count", "next_attempt_at"]
        if node.kind == NodeKind.ACTION and not node.idempotency_key:
            # Persisted before anything is submitted, and sent to the venue with the submit.
            node.idempotency_key = attempt_idempotency_key(node)
            fields.append("idempotency_key")
        target = NS.OBSERVING if node.kind == NodeKind.OBSERVE else NS.PREPARING
        set_node_state(
            node=node,
            new_state=target,
            actor=actor,
            update_fields=fields,
            detail={"worker": owner, "dispatch": node.dispatch_count},
        )


def claim_ready_node(*, owner: str, as_of: Any = None) -> Claim | None:
    """Claim the next due READY node (see ``claim_ready_nodes``)."""
    claims = claim_ready_nodes(owner=owner, as_of=as_of, limit=1)
    return claims[0] if claims else None


@transaction.atomic
def _claim_watched(*, owner: str, states: tuple, as_of: Any, limit: int) -> list[Claim]:
    nodes = _lock_batch(states, WATCH_REQUEST_STATES, as_of, limit)
    if not nodes:
        return []
    for node in nodes:
        _take_lease(node, owner)
    # One lease for the whole batch, written in one statement (no state change).
    MovementRequestNode.objects.filter(pk__in=[node.pk for node in nodes]).update(
        lease_owner=owner,
        lease_expires_at=nodes[0].lease_expires_at,
        heartbeat_at=nodes[0].heartbeat_at,
        updated_at=nodes[0].heartbeat_at,
    )
    return _make_claims(nodes, owner)


def claim_observable_nodes(*, owner: str, as_of: Any = None, limit: int = 1) -> list[Claim]:
    """Lease up to ``limit`` due SUBMITTED/OBSERVING nodes (no state change: the observer
    does not pre-flip SUBMITTED rows, so SUBMITTED -> UNKNOWN stays a real edge)."""
    return _claim_watched(
        owner=owner, states=(NS.SUBMITTED, NS.OBSERVING), as_of=as_of, limit=limit
    )


def claim_unknown_nodes(*, owner: str, as_of: Any = None, limit: int = 1) -> list[Claim]:
    """Lease up to ``limit`` due UNKNOWN nodes for recovery."""
    return _claim_watched(owner=owner, states=(NS.UNKNOWN,), as_of=as_of, limit=limit)


def claim_observable_node(*, owner: str, as_of: Any = None) -> Claim | None:
    claims = claim_observable_nodes(owner=owner, as_of=as_of)
    return claims[0] if claims else None


def claim_unknown_node(*, owner: str, as_of: Any = None) -> Claim | None:
    claims = claim_unknown_nodes(owner=owner, as_of=as_of)
    return claims[0] if claims else None


class _LeaseKeeper:
    """A worker runs its batch one node after another; before each executor call, once half
    the lease has gone by, it renews the lease of every node of the batch it still holds,
    so nodes waiting their turn are not taken for abandoned."""

    def __init__(self, claims: list[Claim]) -> None:
        self.claims = claims
        self.renew_at = timezone.now() + timedelta(seconds=settings.QTG_LEASE_SECONDS / 2)

    def tick(self) -> None:
        now = timezone.now()
        if now < self.renew_at or not self.claims:
            return
        owner = self.claims[0].owner
        ours = set(
            MovementRequestNode.objects.filter(
                pk__in=[claim.node_id for claim in self.claims],
                lease_owner=owner,
                node_state__in=IN_FLIGHT_NODE_STATES,
            ).values_list("pk", flat=True)
        )
        self.claims = [claim for claim in self.claims if claim.node_id in ours]
        with transaction.atomic():
            # A row another transaction holds is skipped, never waited for (no lock cycle
            # with a batch that holds its request), and renewed at the next tick.
            held = set(
                MovementRequestNode.objects.select_for_update(skip_locked=True, no_key=True)
                .filter(pk__in=ours, lease_owner=owner)
                .values_list("pk", flat=True)
            )
            MovementRequestNode.objects.filter(pk__in=held).update(
                lease_expires_at=_lease_until(), heartbeat_at=now, updated_at=now
            )
        if held == ours:
            self.renew_at = now + timedelta(seconds=settings.QTG_LEASE_SECONDS / 2)


# --- result transactions ----------------------------------------------------------------------
#
# The results of a batch of claims are applied in one transaction: the requests are locked in
# primary-key order, then every current node of those requests (the house order, and the same
# order in every worker, so batches never deadlock), and each result is applied to those
# locked instances. Frontier advancement and derivation read the same instances, so two nodes
# of one request in one batch see each other's new state. If applying any result raises, the
# batch is rolled back and every result is applied again in a transaction of its own, so one
# bad result never costs the others.


@dataclass
class Locked:
    """A claimed node under its row lock, with its request and every current node of it."""

    request: MovementRequest
    node: MovementRequestNode
    nodes: list[MovementRequestNode]


@dataclass
class _Result:
    """One outcome to apply: ``apply`` runs under the lock if the lease is still ours;
    otherwise ``outcome`` is kept as evidence of a late result."""

    claim: Claim
    phase: str
    expected: tuple
    apply: Callable[[Locked], Any]
    outcome: dict[str, Any]
    applied: bool = False
    value: Any = None


def _lock_claimed(claims: list[Claim]) -> dict[int, Locked]:
    request_ids = sorted({claim.request_id for claim in claims}, key=str)
    requests = {
        request.pk: request
        for request in MovementRequest.objects.select_for_update(no_key=True)
        .filter(pk__in=request_ids)
        .order_by("pk")
    }
    nodes = list(
        MovementRequestNode.objects.current()
        .filter(request_id__in=request_ids)
        .select_related("plan_node")
        .select_for_update(of=("self",), no_key=True)
        .order_by("request_id", "plan_node__position", "pk")
    )
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
    if node.lease_owner != claim.owner or node.node_state not in expected:
        return f"node {node.node_key} is {node.node_state}, lease {node.lease_owner!r}"
    return None


def _apply_results(results: list[_Result]) -> None:
    """Apply ``results`` in one transaction (see above); late ones are kept as evidence."""
    if not results:
        return
    late: list[tuple[_Result, str]] = []
    try:
        with transaction.atomic(), interface.callbacks().read_once(), deferred_writes():
            locked = _lock_claimed([result.claim for result in results])
            for result in results:
                target = locked.get(result.claim.node_id)
                problem = _lease_problem(result.claim, target, result.expected)
                if problem is not None:
                    late.append((result, problem))
                    continue
                result.value = result.apply(target)
                result.applied = True
                result.claim.node = target.node
    except Exception:
        if len(results) == 1:
            raise
        logger.exception("applying a batch of %s results failed; applying one by one", len(results))
        errors = []
        for result in results:
            result.applied, result.value = False, None
            try:
                _apply_results([result])
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0] from None
        return
    for result, problem in late:
        _late_result(result.claim, result.phase, result.outcome, problem)


class _Unwritten:
    """Results a worker holds until it writes them, together, in one transaction: when its
    batch is done, or sooner once ``QTG_RESULT_WRITE_SECONDS`` have gone by since the last
    write, so a slow venue never leaves a known result unwritten for long."""

    def __init__(self, results: list[_Result] | None = None) -> None:
        self.results = list(results or [])
        self.seen = list(self.results)
        self.written_at = time.monotonic()

    def add(self, result: _Result) -> None:
        self.results.append(result)
        self.seen.append(result)
        if time.monotonic() - self.written_at >= settings.QTG_RESULT_WRITE_SECONDS:
            self.write()

    def write(self) -> None:
        results, self.results = self.results, []
        _apply_results(results)
        self.written_at = time.monotonic()


def _late_result(claim: Claim, phase: str, outcome: dict[str, Any], reason: str) -> None:
    """Keep the evidence of a result that came too late to be applied."""
    with transaction.atomic():
        request = MovementRequest.objects.select_for_update(no_key=True).get(pk=claim.request_id)
        node = MovementRequestNode.objects.get(pk=claim.node_id)
        node.request = request
        record_event(
            request=request,
            node=node,
            actor=_actor(claim.owner),
            detail={"late_result": phase, "outcome": outcome, "reason": reason},
        )
    logger.warning("late %s result for node %s dropped: %s", phase, claim.node_id, reason)


def _release_lease(node: MovementRequestNode) -> list[str]:
    node.lease_owner = ""
    node.lease_expires_at = None
    return ["lease_owner", "lease_expires_at"]


def _error_detail(exc: BaseException) -> dict[str, Any]:
    detail: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}"}
    evidence = getattr(exc, "evidence", None)
    if evidence:
        detail["evidence"] = evidence
    return detail


def _finish(locked: Locked, actor: Actor) -> None:
    """After a terminal-ish transition: advance on COMPLETED, derive the request otherwise."""
    if locked.node.node_state == NS.COMPLETED:
        advance_after_completion(locked.request, locked.node, locked.nodes, actor=actor)
    else:
        apply_request_state_from_nodes(locked.request, locked.nodes, actor=actor)


def _move(
    node: MovementRequestNode,
    target: NodeState,
    actor: Actor,
    *,
    detail: dict[str, Any] | None = None,
    fields: list[str] | None = None,
) -> None:
    set_node_state(
        node=node, new_state=target, actor=actor, detail=detail, update_fields=fields or []
    )


def _failed_before_submit(claim: Claim, exc: BaseException, phase: str, expected: tuple):
    """Deterministic -> FAILED; anything else before submit -> READY with backoff (or FAILED
    once the dispatch budget is spent)."""
    actor = _actor(claim.owner)

    def apply(locked: Locked) -> NodeState:
        node = locked.node
        detail = {"phase": phase, **_error_detail(exc)}
        node.last_error = detail["error"][:2000]
        fields = [*_release_lease(node), "last_error"]
        give_up = node.dispatch_count >= settings.QTG_MAX_DISPATCHES
        if isinstance(exc, DeterministicError) or give_up:
            if give_up and not isinstance(exc, DeterministicError):
                detail["gave_up_after_dispatches"] = node.dispatch_count
            _move(node, NS.FAILED, actor, detail=detail, fields=fields)
            _finish(locked, actor)
            return NS.FAILED
        node.next_attempt_at = timezone.now() + _backoff(node.dispatch_count)
        detail["retry_at"] = node.next_attempt_at.isoformat()
        _move(node, NS.READY, actor, detail=detail, fields=[*fields, "next_attempt_at"])
        return NS.READY

    return _Result(claim, phase, expected, apply, _error_detail(exc))


def _merge_result(node: MovementRequestNode, detail: dict[str, Any]) -> None:
    if detail:
        node.result = {**(node.result or {}), **detail}


def _to_awaiting_signature(claim: Claim, prepared: Prepared) -> _Result:
    actor = _actor(claim.owner)

    def apply(locked: Locked) -> NodeState:
        node = locked.node
        _merge_result(node, prepared.detail)
        node.lease_expires_at = _lease_until()
        _move(
            node,
            NS.AWAITING_SIGNATURE,
            actor,
            detail=prepared.detail,
            fields=["result", "lease_expires_at"],
        )
        return NS.AWAITING_SIGNATURE

    return _Result(claim, "prepare", (NS.PREPARING,), apply, {"prepared": prepared.detail})


def _submit_now(
    claim: Claim, signed_payload: str, expected: tuple, detail: dict[str, Any], phase: str
) -> bool:
    """Move the node to SUBMITTING right before its submit, with the signed bytes and the
    idempotency key durable first. A compare-and-set on the node row (still ``expected``,
    still our lease) rather than a lock: one statement, and no other node of the batch waits
    in SUBMITTING meanwhile. False (the evidence kept) if the node is no longer ours."""
    node = claim.node
    if node.node_state not in expected:
        _late_result(claim, phase, {"detail": detail}, f"node {node.node_key} is {node.node_state}")
        return False
    node.signed_payload = signed_payload
    node.lease_expires_at = _lease_until()
    _merge_result(node, detail)
    try:
        set_node_state(
            node=node,
            new_state=NS.SUBMITTING,
            actor=_actor(claim.owner),
            detail={**detail, "idempotency_key": node.idempotency_key},
            update_fields=["signed_payload", "lease_expires_at", "result"],
            only_if={"lease_owner": claim.owner},
        )
    except StaleState:
        outcome = {"detail": detail, "signed": bool(signed_payload)}
        _late_result(claim, phase, outcome, f"node {node.node_key} changed or its lease was lost")
        return False
    return True


def run_actions(claims: list[Claim]) -> dict[int, NodeState | None]:
    """PREPARING -> [AWAITING_SIGNATURE ->] SUBMITTING -> SUBMITTED/COMPLETED (or FAILED,
    READY with backoff, UNKNOWN) for a batch of claimed action nodes, each executor call made
    with no transaction open. Each step's results are written for the batch together, except
    SUBMITTING, which each node enters alone right before its own submit (see
    ``_submit_now``). Returns each node's state when this worker let go of it."""
    outcome: dict[int, NodeState | None] = {claim.node_id: None for claim in claims}
    failures: list[_Result] = []
    to_sign: list[tuple[Claim, _Result]] = []
    ready: list[tuple[Claim, str, tuple, dict[str, Any], str]] = []
    leases = _LeaseKeeper(claims)
    for claim in claims:
        leases.tick()
        try:
            prepared = claim.executor.prepare(claim.context)
        except Exception as exc:
            failures.append(_failed_before_submit(claim, exc, "prepare", (NS.PREPARING,)))
            continue
        signed_payload = claim.context.signed_payload
        if claim.signing_required and not signed_payload:
            to_sign.append((claim, _to_awaiting_signature(claim, prepared)))
        else:
            detail = dict(prepared.detail)
            if signed_payload:
                detail["signed_payload"] = "re-used the persisted signed payload (not re-signed)"
            ready.append((claim, signed_payload, (NS.PREPARING,), detail, "prepare"))
    _apply_results([*failures, *(result for _, result in to_sign)])
    finished = list(failures)

    failures = []
    for claim, awaiting in to_sign:
        if not awaiting.applied:
            continue
        leases.tick()
        try:
            signed = claim.executor.sign(claim.context)
        except Exception as exc:
            failures.append(_failed_before_submit(claim, exc, "sign", (NS.AWAITING_SIGNATURE,)))
            continue
        ready.append((claim, signed.payload, (NS.AWAITING_SIGNATURE,), signed.detail, "sign"))

    # Sign failures and submit results are written together. A worker that dies before they
    # are leaves its submitted nodes in SUBMITTING: their leases expire, recovery asks the venue.
    unwritten = _Unwritten(failures)
    for claim, signed_payload, expected, detail, phase in ready:
        leases.tick()
        if not _submit_now(claim, signed_payload, expected, detail, phase):
            continue
        ctx = replace(claim.context, signed_payload=signed_payload)
        try:
            submitted: Submitted | None = claim.executor.submit(ctx)
            error: BaseException | None = None
        except Exception as exc:
            submitted, error = None, exc
        unwritten.add(_submit_result(claim, submitted, error))
    unwritten.write()
    finished += unwritten.seen
    for result in finished:
        if result.applied:
            outcome[result.claim.node_id] = result.value
    return outcome


def run_action(claim: Claim) -> NodeState | None:
    """Run one claimed action node (see ``run_actions``)."""
    return run_actions([claim])[claim.node_id]


def _submit_result(claim: Claim, submitted: Submitted | None, error: BaseException | None):
    actor = _actor(claim.owner)

    def apply(locked: Locked) -> NodeState:
        node = locked.node
        fields = _release_lease(node)
        if submitted is not None:
            node.external_ref = submitted.external_ref
            _merge_result(node, submitted.detail)
            target = NS.COMPLETED if submitted.done else NS.SUBMITTED
            if target == NS.SUBMITTED:
                node.next_attempt_at = _poll_after(claim.executor)
                fields.append("next_attempt_at")
            _move(
                node,
                target,
                actor,
                detail={"external_ref": submitted.external_ref, **submitted.detail},
                fields=[*fields, "external_ref", "result"],
            )
        else:
            node.last_error = _error_detail(error)["error"][:2000]
            # Deterministic: the venue refused, nothing happened. Anything else during
            # submit is ambiguous: money may have moved, so recovery must find out.
            target = NS.FAILED if isinstance(error, DeterministicError) else NS.UNKNOWN
            node.next_attempt_at = timezone.now()
            _move(
                node,
                target,
                actor,
                detail={
                    "phase": "submit",
                    "ambiguous": target == NS.UNKNOWN,
                    **_error_detail(error),
                },
                fields=[*fields, "last_error", "next_attempt_at"],
            )
        if target != NS.SUBMITTED:
            _finish(locked, actor)
        return target

    outcome = (
        {"external_ref": submitted.external_ref, **submitted.detail}
        if submitted is not None
        else _error_detail(error)
    )
    return _Result(claim, "submit", (NS.SUBMITTING,), apply, outcome)


OBSERVED_TARGETS = {
    ObservedStatus.COMPLETED: NS.COMPLETED,
    ObservedStatus.FAILED: NS.FAILED,
    ObservedStatus.UNKNOWN: NS.UNKNOWN,
    ObservedStatus.REORG: NS.UNKNOWN,
}


def _observe_result(claim: Claim) -> _Result:
    """Observe once (no transaction open) and say how to apply what was seen: COMPLETED,
    FAILED, UNKNOWN (ambiguous, or a reorg: recorded with its evidence first), or still
    pending (polled again later)."""
    try:
        observation: Observation | None = claim.executor.observe(claim.context)
        error: BaseException | None = None
    except Exception as exc:
        observation, error = None, exc
    actor = _actor(claim.owner)

    def apply(locked: Locked) -> NodeState | None:
        request, node = locked.request, locked.node
        fields = _release_lease(node)
        if observation is None:
            detail = {"phase": "observe", **_error_detail(error)}
            node.last_error = detail["error"][:2000]
            fields.append("last_error")
            if isinstance(error, TransientError):
                node.next_attempt_at = timezone.now() + _backoff(node.dispatch_count or 1)
                save_fields(node, [*fields, "next_attempt_at"])
                return None
            target = NS.FAILED if isinstance(error, DeterministicError) else NS.UNKNOWN
            node.next_attempt_at = timezone.now()
            _move(node, target, actor, detail=detail, fields=[*fields, "next_attempt_at"])
            _finish(locked, actor)
            return target
        _merge_result(node, observation.detail)
        if observation.external_ref and not node.external_ref:
            node.external_ref = observation.external_ref
        fields += ["result", "external_ref"]
        target = OBSERVED_TARGETS.get(observation.status)
        if target is None:  # still pending
            node.next_attempt_at = _poll_after(claim.executor)
            fields.append("next_attempt_at")
            if node.node_state == NS.SUBMITTED:
                _move(node, NS.OBSERVING, actor, detail=observation.detail, fields=fields)
            else:
                save_fields(node, fields)
            return None
        if observation.status == ObservedStatus.REORG:
            record_event(
                request=request, node=node, actor=actor, detail={"reorg": observation.detail}
            )
        if target == NS.UNKNOWN:
            node.next_attempt_at = timezone.now()
            fields.append("next_attempt_at")
        _move(
            node,
            target,
            actor,
            detail={"observed": str(observation.status), **observation.detail},
            fields=fields,
        )
        _finish(locked, actor)
        return target

    outcome = (
        {"status": str(observation.status), **observation.detail}
        if observation is not None
        else _error_detail(error)
    )
    return _Result(claim, "observe", (NS.SUBMITTED, NS.OBSERVING), apply, outcome)


def _ask_each_then_apply(
    claims: list[Claim], ask: Callable[[Claim], _Result]
) -> dict[int, NodeState | None]:
    """Ask the venue about each claimed node in turn (no transaction open) and write the
    answers together (see ``_Unwritten``). Returns each node's new state (None where it did
    not move)."""
    leases, unwritten = _LeaseKeeper(claims), _Unwritten()
    for claim in claims:
        leases.tick()
        unwritten.add(ask(claim))
    unwritten.write()
    return {result.claim.node_id: result.value for result in unwritten.seen}


def run_observes(claims: list[Claim]) -> dict[int, NodeState | None]:
    """One observation of each claimed SUBMITTED/OBSERVING node, the results written in one
    transaction. Returns each node's new state (None while still pending)."""
    return _ask_each_then_apply(claims, _observe_result)


def run_observe(claim: Claim) -> NodeState | None:
    """Observe one claimed node (see ``run_observes``)."""
    return run_observes([claim])[claim.node_id]


RECOVERED_TARGETS = {
    RecoveredOutcome.SUBMITTED: NS.SUBMITTED,
    RecoveredOutcome.COMPLETED: NS.COMPLETED,
    RecoveredOutcome.FAILED: NS.FAILED,
}


def _recover_result(claim: Claim) -> _Result:
    """Ask the venue (no transaction open) and say how to apply the finding: SUBMITTED,
    COMPLETED or FAILED; any error or an unanswerable question leaves the node UNKNOWN, to
    be asked again later."""
    try:
        recovery: Recovery | None = claim.executor.recover(claim.context)
        error: BaseException | None = None
    except Exception as exc:
        recovery, error = None, exc
    actor = _actor(claim.owner)

    def apply(locked: Locked) -> NodeState | None:
        node = locked.node
        fields = _release_lease(node)
        target = RECOVERED_TARGETS.get(recovery.outcome) if recovery is not None else None
        if target is None:
            node.dispatch_count += 1
            node.next_attempt_at = timezone.now() + _backoff(node.dispatch_count)
            fields += ["next_attempt_at", "dispatch_count"]
            if error is not None:
                node.last_error = _error_detail(error)["error"][:2000]
                fields.append("last_error")
            save_fields(node, fields)
            return None
        if recovery.external_ref:
            node.external_ref = recovery.external_ref
        _merge_result(node, recovery.detail)
        if target == NS.SUBMITTED:
            node.next_attempt_at = timezone.now()
            fields.append("next_attempt_at")
        _move(
            node,
            target,
            actor,
            detail={"resolution": "recovery", **recovery.detail},
            fields=[*fields, "external_ref", "result"],
        )
        _finish(locked, actor)
        return target

    outcome = (
        {"outcome": str(recovery.outcome), **recovery.detail}
        if recovery is not None
        else _error_detail(error)
    )
    return _Result(claim, "recover", (NS.UNKNOWN,), apply, outcome)


def run_recovers(claims: list[Claim]) -> dict[int, NodeState | None]:
    """Reconcile each claimed UNKNOWN node with its venue; results written in one
    transaction."""
    return _ask_each_then_apply(claims, _recover_result)


def run_recover(claim: Claim) -> NodeState | None:
    """Recover one claimed node (see ``run_recovers``)."""
    return run_recovers([claim])[claim.node_id]


# --- one step and the sweeps the periodic tasks run -------------------------------------------


def _run_dispatched(claims: list[Claim]) -> None:
    run_observes([claim for claim in claims if claim.kind == NodeKind.OBSERVE])
    run_actions([claim for claim in claims if claim.kind != NodeKind.OBSERVE])


def dispatch_one(*, owner: str, as_of: Any = None) -> bool:
    """Claim one READY node and run it as far as it goes now; False when none is due."""
    return _sweep(claim_ready_nodes, _run_dispatched, owner=owner, limit=1, as_of=as_of) == 1


def observe_one(*, owner: str, as_of: Any = None) -> bool:
    return _sweep(claim_observable_nodes, run_observes, owner=owner, limit=1, as_of=as_of) == 1


def recover_one(*, owner: str, as_of: Any = None) -> bool:
    return _sweep(claim_unknown_nodes, run_recovers, owner=owner, limit=1, as_of=as_of) == 1


def _sweep(claim_batch, run_batch, *, owner: str, limit: int, as_of: Any = None) -> int:
    """Claim due nodes a batch at a time (``QTG_CLAIM_BATCH`` per claim transaction) and run
    the batch, until none is left or ``limit`` ran. Only what was due when the sweep began
    counts as due, so a node polled again right away is left for the next sweep."""
    done, as_of = 0, as_of or timezone.now()
    while done < limit:
        claims = claim_batch(
            owner=owner, as_of=as_of, limit=min(settings.QTG_CLAIM_BATCH, limit - done)
        )
        if not claims:
            break
        run_batch(claims)
        done += len(claims)
    return done


def dispatch_ready_nodes(*, owner: str | None = None, limit: int = 100) -> int:
    """Dispatch due READY nodes until none is left (or ``limit``); return how many."""
    return _sweep(claim_ready_nodes, _run_dispatched, owner=owner or worker_identity(), limit=limit)


def observe_submitted_nodes(*, owner: str | None = None, limit: int = 100) -> int:
    """Observe due SUBMITTED/OBSERVING nodes once each (up to ``limit``); return how many."""
    return _sweep(
        claim_observable_nodes, run_observes, owner=owner or worker_identity(), limit=limit
    )


def recover_unknown_nodes(*, owner: str | None = None, limit: int = 100) -> int:
    """Run recovery on due UNKNOWN nodes (up to ``limit``); return how many."""
    return _sweep(claim_unknown_nodes, run_recovers, owner=owner or worker_identity(), limit=limit)


def due_count(*, phase: str) -> int:
    """How many nodes a sweep of ``phase`` (dispatch/observe/recover) would find now."""
    now = timezone.now()
    states, request_states = {
        "dispatch": ((NS.READY,), DISPATCH_REQUEST_STATES),
        "observe": ((NS.SUBMITTED, NS.OBSERVING), WATCH_REQUEST_STATES),
        "recover": ((NS.UNKNOWN,), WATCH_REQUEST_STATES),
    }[phase]
    return (
        MovementRequestNode.objects.current()
        .filter(node_state__in=states, request__request_state__in=request_states)
        .filter(_due(now), _lease_free(now))
        .exclude(kind=NodeKind.MANUAL_GATE)
        .count()
    )


REAPED = {
    NS.PREPARING: NS.READY,
    NS.AWAITING_SIGNATURE: NS.READY,
    NS.SUBMITTING: NS.UNKNOWN,
}


def reap_expired_leases(*, actor: Actor | None = None, limit: int = 500) -> int:
    """Nodes whose worker stopped renewing its lease: PREPARING/AWAITING_SIGNATURE go back to
    READY (nothing left the building), SUBMITTING goes to UNKNOWN (it may have), to be
    reconciled by recovery and never submitted again. Returns how many moved."""
    actor = actor or Actor.system("lease-reaper")
    now = timezone.now()
    candidates = list(
        MovementRequestNode.objects.current()
        .filter(node_state__in=list(REAPED), lease_expires_at__lte=now)
        .values_list("pk", "request_id")[:limit]
    )
    moved = 0
    for node_pk, request_pk in candidates:
        with transaction.atomic():
            request = MovementRequest.objects.select_for_update(no_key=True).get(pk=request_pk)
            node = MovementRequestNode.objects.select_for_update(of=("self",), no_key=True).get(
                pk=node_pk
            )
            node.request = request
            if (
                node.node_state not in REAPED
                or node.lease_expires_at is None
                or (node.lease_expires_at > timezone.now())
            ):
                continue
            target = REAPED[NodeState(node.node_state)]
            detail = {
                "reason": "lease expired",
                "lease_owner": node.lease_owner,
                "lease_expired_at": node.lease_expires_at.isoformat(),
            }
            fields = _release_lease(node)
            if target == NS.READY:
                node.next_attempt_at = timezone.now() + _backoff(node.dispatch_count)
            else:
                node.next_attempt_at = timezone.now()
            _move(node, target, actor, detail=detail, fields=[*fields, "next_attempt_at"])
            if target == NS.UNKNOWN:
                apply_request_state_from_nodes(request, actor=actor)
            moved += 1
    return moved


__all__ = [
    "Claim",
    "attempt_idempotency_key",
    "claim_observable_node",
    "claim_observable_nodes",
    "claim_ready_node",
    "claim_ready_nodes",
    "claim_unknown_node",
    "claim_unknown_nodes",
    "dispatch_one",
    "dispatch_ready_nodes",
    "due_count",
    "observe_submitted_nodes",
    "reap_expired_leases",
    "recover_unknown_nodes",
    "run_action",
    "run_actions",
    "run_observe",
    "run_observes",
    "run_recover",
    "run_recovers",
    "worker_identity",
]

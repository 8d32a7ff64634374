"""Running a claimed batch: the executor calls, one node after another (each taken as far as
it goes before the next), with no transaction open and no lock held, and their results
written as they come: held for one write at most ``QTG_RESULT_WRITE_SECONDS`` (``results``),
but a submit's at once where its movement has another side-effect node (see ``_run_actions``).

The one exception is SUBMITTING, which a node enters alone, right before its own submit, by a
compare-and-set on its state and lease that also finds no FAILED node in its movement, in one
statement and without the movement's lock: a side-effect node whose movement already has a
FAILED node never enters it (it goes back to READY, held for an operator, under the lock), and
derivation never concludes while a sibling is about to submit, since a node PREPARING counts
as money moving just as one SUBMITTING does.

Exactly once: a signed payload is persisted in the same statement that moves the node to
SUBMITTING, with the idempotency key persisted at claim already durable, and is re-used (never
re-signed) by any later attempt or recovery. A worker that dies before its submit results are
written leaves its nodes in SUBMITTING: their leases expire, and recovery asks the venue
(``leases.reap_expired_leases``); they are never submitted again.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from movements.executors.base import Submitted
from movements.instruments import venue_call
from movements.models import MovementRequest, MovementRequestNode
from movements.services.execution.claims import Claim, worker_actor
from movements.services.execution.leases import (
    FENCE_REUSE_SECONDS,
    Fence,
    LeaseKeeper,
    lease_outlasting,
)
from movements.services.execution.results import Result, Unwritten, apply_results, late_result
from movements.services.progress import apply_request_state_from_nodes
from movements.services.state import set_node_state
from movements.states import NodeState
from qtg.core.actors import acting_for
from qtg.core.compiled import Compiled
from qtg.core.errors import StaleState

NS = NodeState


@contextmanager
def _timed(claim: Claim, method: str) -> Iterator[None]:
    """One venue call: timed by executor and method, the node bound to its log lines, and
    what the venue code records naming this worker, its lease epoch and the attempt."""
    label = f"worker:{claim.owner}#epoch{claim.epoch}/attempt{claim.context.attempt}"
    with (
        acting_for(label),
        venue_call(executor=claim.node.executor, method=method, context=claim.context),
    ):
        yield


def _merge_result(node: Any, detail: dict[str, Any]) -> None:
    if detail:
        node.result = {**(node.result or {}), **detail}


def _submit_now(
    claim: Claim, signed_payload: str, expected: tuple, detail: dict[str, Any], phase: str
) -> bool:
    """Move the node to SUBMITTING right before its submit, with the signed bytes and the
    idempotency key durable first. A compare-and-set on the node row (still ``expected``,
    still our lease) rather than a lock: one statement, and no other node of the batch waits
    in SUBMITTING meanwhile. False (the evidence kept) if the node is no longer ours."""
    node = claim.node
    if node.node_state not in expected:
        late_result(claim, phase, {"detail": detail}, f"node {node.node_key} is {node.node_state}")
        return False
    # The fence: the same statement proves the lease (owner and epoch) and makes it outlast
    # the submit call's timeout; an executor fences again right before its request leaves,
    # on this proof when that is at once (``leases.Fence``).
    proved_at, now = time.monotonic(), timezone.now()
    timeout = claim.executor.call_timeout(claim.context)
    node.fenced_at = now
    node.fenced_until = now + timedelta(seconds=timeout + FENCE_REUSE_SECONDS)
    node.signed_payload = signed_payload
    node.lease_expires_at = lease_outlasting(node.fenced_until)
    node.submit_started_at = now
    if any((node.result or {}).get(key) for key in ("waiting_since", "lost_since")):
        # The venue let it through, and a worker held it long enough to submit.
        node.result = {**node.result, "waiting_since": None, "lost_since": None}
    _merge_result(node, detail)
    try:
        # No lock: the compare-and-set itself refuses while a node of the movement is FAILED
        # (NOT EXISTS in the same statement). A sibling failing at the same moment cannot
        # end the movement under a submit: the derivation it runs sees this node PREPARING
        # or SUBMITTING, and both count as money moving (no verdict).
        set_node_state(
            node=node,
            new_state=NS.SUBMITTING,
            actor=worker_actor(claim.owner, claim.epoch),
            detail={**detail, "idempotency_key": node.idempotency_key},
            update_fields=[
                "signed_payload",
                "lease_expires_at",
                "result",
                "submit_started_at",
                "fenced_at",
                "fenced_until",
            ],
            only_if={"lease_owner": claim.owner, "lease_epoch": claim.epoch},
            unless_exists=(
                _FAILED_SIBLINGS.bound(request=claim.request_id) if node.has_side_effect else None
            ),
        )
    except StaleState:
        if node.has_side_effect and _held_back(claim, expected):
            return False
        outcome = {"detail": detail, "signed": bool(signed_payload)}
        late_result(claim, phase, outcome, f"node {node.node_key} changed or its lease was lost")
        return False
    if isinstance(claim.context.fence, Fence):
        claim.context.fence.proven(at=proved_at, timeout=timeout, deadline=node.fenced_until)
    return True


def _failed_nodes(*, request: Any) -> Any:
    return MovementRequestNode.objects.current().filter(request_id=request, node_state=NS.FAILED)


def _failed_siblings(claim: Claim) -> Any:
    return _failed_nodes(request=claim.request_id)


# Every side-effect node's compare-and-set to SUBMITTING embeds it (``qtg.core.compiled``).
_FAILED_SIBLINGS = Compiled(
    lambda *, request: _failed_nodes(request=request).values("pk"),
    request=MovementRequestNode._meta.get_field("request"),
)


def _held_back(claim: Claim, expected: tuple) -> bool:
    """The compare-and-set to SUBMITTING was lost: if the node is still ours, as it was, a
    node of the movement FAILED; hold this side effect back, under the movement's lock."""
    with transaction.atomic():
        request = MovementRequest.objects.select_for_update(no_key=True).get(pk=claim.request_id)
        node = claim.node
        node.refresh_from_db()  # the lost write left the instance SUBMITTING in memory
        node.request = request
        if node.node_state not in expected or node.lease_owner != claim.owner:
            return False
        failed = list(_failed_siblings(claim).values_list("node_key", flat=True))
        if not failed:
            return False
        _hold_back(claim, failed)
        return True


def _hold_back(claim: Claim, failed: list[str]) -> None:
    """A node of the movement FAILED: this side effect does not start. Back to READY (its
    lease released), where it waits for an operator; the movement is derived again, now that
    one less node may be moving money. The caller holds the movement's lock."""
    node, actor = claim.node, worker_actor(claim.owner, claim.epoch)
    node.lease_owner, node.lease_expires_at, node.next_attempt_at = "", None, None
    set_node_state(
        node=node,
        new_state=NS.READY,
        actor=actor,
        detail={"held_back": True, "reason": f"{', '.join(failed)} FAILED: no new side effect"},
        update_fields=["lease_owner", "lease_expires_at", "next_attempt_at"],
        only_if={"lease_owner": claim.owner},
    )
    apply_request_state_from_nodes(node.request, actor=actor)


def run_actions(claims: list[Claim]) -> dict[int, NodeState | None]:
    """PREPARING -> [AWAITING_SIGNATURE ->] SUBMITTING -> SUBMITTED/COMPLETED (or FAILED,
    READY with backoff, UNKNOWN) for a batch of claimed action nodes, each executor call made
    with no transaction open. Each node is taken as far as it goes (prepared, signed,
    submitted) before the next one is prepared, so a worker that dies mid-batch leaves at most
    one node with a call in flight; results are held at most ``QTG_RESULT_WRITE_SECONDS``
    (``Unwritten``), a submit's written at once where another node of its movement has a side
    effect. SUBMITTING is entered alone, right before the node's own submit (see
    ``_submit_now``). Returns each node's state when this worker let go of it."""
    with LeaseKeeper(claims) as leases:
        return _run_actions(claims, leases)


def _run_actions(claims: list[Claim], leases: LeaseKeeper) -> dict[int, NodeState | None]:
    outcome: dict[int, NodeState | None] = {claim.node_id: None for claim in claims}
    unwritten = Unwritten(batch_size=len(claims))
    for claim in claims:
        leases.tick()
        if unwritten.holds(claim.request_id):
            # A sibling's result may be a FAILED node: written before this node may submit
            # (the SUBMITTING compare-and-set refuses while a node of the movement is FAILED).
            unwritten.write()
        result = _run_action(claim, leases)
        if result is not None:
            # Until a submit's answer is written the node stays SUBMITTING, and a worker that
            # dies meanwhile leaves it to recovery as UNKNOWN. Recovery settles it by itself
            # unless another side effect of the movement completed: then it is a person's
            # (derivation's MANUAL_INTERVENTION), so such an answer is never held. Any other
            # answer lost with a worker costs a lease's wait, not a person's time.
            at_once = result.phase == "submit" and claim.shares_side_effects
            unwritten.add(result, at_once=at_once)
    unwritten.write()
    for result in unwritten.seen:
        if result.applied:
            outcome[result.claim.node_id] = result.value
    return outcome


def _run_action(claim: Claim, leases: LeaseKeeper) -> Result | None:
    """One claimed action node as far as it goes now: the result to write (None when the node
    was no longer ours, its evidence already kept)."""
    try:
        with _timed(claim, "prepare"):
            prepared = claim.executor.prepare(claim.context)
    except Exception as exc:
        return Result(claim, "prepare", error=exc)
    signed_payload = claim.context.signed_payload
    if claim.signing_required and not signed_payload:
        # AWAITING_SIGNATURE is written before the signer is asked (the SUBMITTING
        # compare-and-set starts from it).
        awaiting = Result(claim, "prepare", answer=prepared)
        apply_results([awaiting])
        if not awaiting.applied or awaiting.value != NS.AWAITING_SIGNATURE:
            return None
        leases.tick()
        try:
            with _timed(claim, "sign"):
                signed = claim.executor.sign(claim.context)
        except Exception as exc:
            return Result(claim, "sign", error=exc)
        return _submit(claim, signed.payload, (NS.AWAITING_SIGNATURE,), signed.detail, "sign")
    detail = dict(prepared.detail)
    if signed_payload:
        detail["signed_payload"] = "re-used the persisted signed payload (not re-signed)"
    return _submit(claim, signed_payload, (NS.PREPARING,), detail, "prepare")


def _submit(
    claim: Claim, signed_payload: str, expected: tuple, detail: dict[str, Any], phase: str
) -> Result | None:
    """SUBMITTING (fenced), then the executor's submit: its result, or None when the node was
    no longer ours (nothing was sent)."""
    if not _submit_now(claim, signed_payload, expected, detail, phase):
        return None
    ctx = replace(claim.context, signed_payload=signed_payload)
    try:
        with _timed(claim, "submit"):
            submitted: Submitted | None = claim.executor.submit(ctx)
        error: BaseException | None = None
    except Exception as exc:
        submitted, error = None, exc
    return Result(claim, "submit", answer=submitted, error=error)


def run_action(claim: Claim) -> NodeState | None:
    """Run one claimed action node (see ``run_actions``)."""
    return run_actions([claim])[claim.node_id]


def _ask(method: str) -> Callable[[Claim], Result]:
    def ask(claim: Claim) -> Result:
        try:
            with _timed(claim, method):
                answer = getattr(claim.executor, method)(claim.context)
            return Result(claim, method, answer=answer)
        except Exception as exc:
            return Result(claim, method, error=exc)

    return ask


def _ask_each_then_apply(
    claims: list[Claim], ask: Callable[[Claim], Result]
) -> dict[int, NodeState | None]:
    """Ask the venue about each claimed node in turn (no transaction open) and write the
    answers together (see ``results.Unwritten``). Returns each node's new state (None where
    it did not move)."""
    unwritten = Unwritten(batch_size=len(claims))
    with LeaseKeeper(claims) as leases:
        for claim in claims:
            leases.tick()
            unwritten.add(ask(claim))
        unwritten.write()
    return {result.claim.node_id: result.value for result in unwritten.seen}


def run_observes(claims: list[Claim]) -> dict[int, NodeState | None]:
    """One observation of each claimed SUBMITTED/OBSERVING node: COMPLETED, FAILED, UNKNOWN
    (ambiguous, or a reorg: recorded with its evidence first), or still pending (polled again
    later). Returns each node's new state (None while still pending)."""
    return _ask_each_then_apply(claims, _ask("observe"))


def run_recovers(claims: list[Claim]) -> dict[int, NodeState | None]:
    """Reconcile each claimed UNKNOWN node with its venue: SUBMITTED, COMPLETED or FAILED; any
    error or an unanswerable question leaves the node UNKNOWN, to be asked again later."""
    return _ask_each_then_apply(claims, _ask("recover"))

"""Running a claimed batch: the executor calls, one node after another, with no transaction
open and no lock held, and their results written for the batch together (``results``).

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

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.db import transaction
from django.utils import timezone

from movements.executors.base import Submitted
from movements.instruments import venue_call
from movements.models import MovementRequest, MovementRequestNode
from movements.services.execution.claims import Claim, worker_actor
from movements.services.execution.leases import LeaseKeeper, lease_until
from movements.services.execution.results import Result, Unwritten, apply_results, late_result
from movements.services.progress import apply_request_state_from_nodes
from movements.services.state import set_node_state
from movements.states import NodeState
from qtg.core.errors import StaleState

NS = NodeState


def _timed(claim: Claim, method: str) -> Any:
    """One venue call: timed by executor and method, the node bound to its log lines."""
    return venue_call(executor=claim.node.executor, method=method, context=claim.context)


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
    node.signed_payload = signed_payload
    node.lease_expires_at = lease_until()
    node.submit_started_at = timezone.now()
    _merge_result(node, detail)
    try:
        # No lock: the compare-and-set itself refuses while a node of the movement is FAILED
        # (NOT EXISTS in the same statement). A sibling failing at the same moment cannot
        # end the movement under a submit: the derivation it runs sees this node PREPARING
        # or SUBMITTING, and both count as money moving (no verdict).
        set_node_state(
            node=node,
            new_state=NS.SUBMITTING,
            actor=worker_actor(claim.owner),
            detail={**detail, "idempotency_key": node.idempotency_key},
            update_fields=["signed_payload", "lease_expires_at", "result", "submit_started_at"],
            only_if={"lease_owner": claim.owner},
            unless_exists=_failed_siblings(claim) if node.has_side_effect else None,
        )
    except StaleState:
        if node.has_side_effect and _held_back(claim, expected):
            return False
        outcome = {"detail": detail, "signed": bool(signed_payload)}
        late_result(claim, phase, outcome, f"node {node.node_key} changed or its lease was lost")
        return False
    return True


def _failed_siblings(claim: Claim) -> Any:
    return MovementRequestNode.objects.current().filter(
        request_id=claim.request_id, node_state=NS.FAILED
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
    node, actor = claim.node, worker_actor(claim.owner)
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
    with no transaction open. Each step's results are written for the batch together, except
    SUBMITTING, which each node enters alone right before its own submit (see
    ``_submit_now``). Returns each node's state when this worker let go of it."""
    with LeaseKeeper(claims) as leases:
        return _run_actions(claims, leases)


def _run_actions(claims: list[Claim], leases: LeaseKeeper) -> dict[int, NodeState | None]:
    outcome: dict[int, NodeState | None] = {claim.node_id: None for claim in claims}
    failures: list[Result] = []
    to_sign: list[tuple[Claim, Result]] = []
    ready: list[tuple[Claim, str, tuple, dict[str, Any], str]] = []
    for claim in claims:
        leases.tick()
        try:
            with _timed(claim, "prepare"):
                prepared = claim.executor.prepare(claim.context)
        except Exception as exc:
            failures.append(Result(claim, "prepare", error=exc))
            continue
        signed_payload = claim.context.signed_payload
        if claim.signing_required and not signed_payload:
            to_sign.append((claim, Result(claim, "prepare", answer=prepared)))
        else:
            detail = dict(prepared.detail)
            if signed_payload:
                detail["signed_payload"] = "re-used the persisted signed payload (not re-signed)"
            ready.append((claim, signed_payload, (NS.PREPARING,), detail, "prepare"))
    apply_results([*failures, *(result for _, result in to_sign)])
    finished = list(failures)

    failures = []
    for claim, awaiting in to_sign:
        if not awaiting.applied:
            continue
        leases.tick()
        try:
            with _timed(claim, "sign"):
                signed = claim.executor.sign(claim.context)
        except Exception as exc:
            failures.append(Result(claim, "sign", error=exc))
            continue
        ready.append((claim, signed.payload, (NS.AWAITING_SIGNATURE,), signed.detail, "sign"))

    # Sign failures and submit results are written together. A worker that dies before they
    # are leaves its submitted nodes in SUBMITTING: their leases expire, recovery asks the venue.
    unwritten = Unwritten(failures)
    for claim, signed_payload, expected, detail, phase in ready:
        leases.tick()
        if not _submit_now(claim, signed_payload, expected, detail, phase):
            continue
        ctx = replace(claim.context, signed_payload=signed_payload)
        try:
            with _timed(claim, "submit"):
                submitted: Submitted | None = claim.executor.submit(ctx)
            error: BaseException | None = None
        except Exception as exc:
            submitted, error = None, exc
        unwritten.add(Result(claim, "submit", answer=submitted, error=error))
    unwritten.write()
    finished += unwritten.seen
    for result in finished:
        if result.applied:
            outcome[result.claim.node_id] = result.value
    return outcome


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
    unwritten = Unwritten()
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

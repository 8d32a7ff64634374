"""The sweeps the periodic tasks run: claim due nodes a batch at a time and run each batch,
until none is left or the sweep's limit ran. Any number of sweeps may run at once on any
number of workers: each claims with SKIP LOCKED, so no node is processed by two at once."""

from typing import Any

from django.conf import settings
from django.db.models import Count, Min, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from movements.models import MovementRequestNode, NodeKind
from movements.services.execution.claims import (
    DISPATCH_REQUEST_STATES,
    WATCH_REQUEST_STATES,
    Claim,
    claim_observable_nodes,
    claim_ready_nodes,
    claim_unknown_nodes,
    due,
    lease_free,
    worker_identity,
)
from movements.services.execution.leases import reap_expired_leases
from movements.services.execution.runs import run_actions, run_observes, run_recovers
from movements.states import NodeState

NS = NodeState


def _run_dispatched(claims: list[Claim]) -> None:
    # The action nodes first: each was claimed PREPARING and is about to move money, while
    # an observe node only polls (a first look a moment later costs nothing).
    run_actions([claim for claim in claims if claim.kind != NodeKind.OBSERVE])
    run_observes([claim for claim in claims if claim.kind == NodeKind.OBSERVE])


def claim_sizes(smallest: int, largest: int):
    """The claim sizes of one sweep: ``smallest`` first, doubling after each full claim up to
    ``largest`` (send the size a claim came back with). A short queue is taken a few nodes
    at a time (low latency; a worker's death parks few nodes until their leases expire), a
    long one in large claims (fewer claim transactions)."""
    size = max(1, min(smallest, largest))
    while True:
        got = yield size
        if got is not None and got >= size:
            size = min(size * 2, max(1, largest))


def first_claim_size(limit: int) -> int:
    """How many nodes a sweep of at most ``limit`` nodes claims first (``claim_sizes``)."""
    return min(next(claim_sizes(settings.QTG_CLAIM_BATCH_MIN, settings.QTG_CLAIM_BATCH)), limit)


def _sweep(
    claim_batch,
    run_batch,
    *,
    owner: str,
    limit: int,
    as_of: Any = None,
    first: dict[str, Any] | None = None,
) -> int:
    """Claim due nodes a batch at a time (sizes from ``claim_sizes``, up to
    ``QTG_CLAIM_BATCH``; the first claim with ``first``'s extra arguments) and run the batch,
    until none is left or ``limit`` ran. Only what was due when the sweep began counts as
    due, so a node polled again right away is left for the next sweep. Every sweep first reaps
    expired leases, so a dead worker's nodes move on whichever worker sweeps next, not only
    when beat's reaper runs."""
    reap_expired_leases()
    done, as_of = 0, as_of or timezone.now()
    sizes = claim_sizes(settings.QTG_CLAIM_BATCH_MIN, settings.QTG_CLAIM_BATCH)
    size = next(sizes)
    extra = first or {}
    while done < limit:
        claims = claim_batch(owner=owner, as_of=as_of, limit=min(size, limit - done), **extra)
        extra = {}
        if not claims:
            break
        run_batch(claims)
        done += len(claims)
        size = sizes.send(len(claims))
    return done


def dispatch_one(*, owner: str, as_of: Any = None) -> bool:
    """Claim one READY node and run it as far as it goes now; False when none is due."""
    return _sweep(claim_ready_nodes, _run_dispatched, owner=owner, limit=1, as_of=as_of) == 1


def dispatch_ready_nodes(*, owner: str | None = None, limit: int = 100) -> int:
    """Dispatch due READY nodes until none is left (or ``limit``); return how many. The first
    claim takes at most ``QTG_CLAIM_FIRST_ACTIONS`` action nodes: a short queue's other action
    nodes are left to the sweeps the tick fanned out for them (``movements.tasks``), run by
    idle workers meanwhile, or to this sweep's next claim."""
    actions = settings.QTG_CLAIM_FIRST_ACTIONS
    return _sweep(
        claim_ready_nodes,
        _run_dispatched,
        owner=owner or worker_identity(),
        limit=limit,
        first={"actions": actions} if actions > 0 else None,
    )


def observe_submitted_nodes(*, owner: str | None = None, limit: int = 100) -> int:
    """Observe due SUBMITTED/OBSERVING nodes once each (up to ``limit``); return how many."""
    return _sweep(
        claim_observable_nodes, run_observes, owner=owner or worker_identity(), limit=limit
    )


def recover_unknown_nodes(*, owner: str | None = None, limit: int = 100) -> int:
    """Run recovery on due UNKNOWN nodes (up to ``limit``); return how many."""
    return _sweep(claim_unknown_nodes, run_recovers, owner=owner or worker_identity(), limit=limit)


SWEPT = {
    "dispatch": ((NS.READY,), DISPATCH_REQUEST_STATES),
    "observe": ((NS.SUBMITTED, NS.OBSERVING), WATCH_REQUEST_STATES),
    "recover": ((NS.UNKNOWN,), WATCH_REQUEST_STATES),
}


def _due_nodes(phase: str, now: Any) -> Any:
    states, request_states = SWEPT[phase]
    return (
        MovementRequestNode.objects.current()
        .filter(node_state__in=states, request__request_state__in=request_states)
        .filter(due(now), lease_free(now))
        .exclude(kind=NodeKind.MANUAL_GATE)
    )


def due_counts(*, phase: str) -> tuple[int, int]:
    """How many nodes a sweep of ``phase`` (dispatch/observe/recover) would find now, and how
    many of them are action nodes (one statement)."""
    counts = _due_nodes(phase, timezone.now()).aggregate(
        due=Count("pk"), actions=Count("pk", filter=Q(kind=NodeKind.ACTION))
    )
    return counts["due"], counts["actions"]


def oldest_due_since(*, now: Any = None) -> Any:
    """Since when the longest-waiting node any sweep would find now has been due (its retry
    time, else when it entered its state); None when nothing is due. Its age is how far the
    workers are behind."""
    now = now or timezone.now()
    since = [
        _due_nodes(phase, now)
        .annotate(due_since=Coalesce("next_attempt_at", "state_changed_at"))
        .aggregate(oldest=Min("due_since"))["oldest"]
        for phase in SWEPT
    ]
    return min((value for value in since if value is not None), default=None)

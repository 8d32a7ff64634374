"""Leases: which worker holds a claimed node, and until when.

A claim gives each node a lease (``QTG_LEASE_SECONDS``). A worker runs its batch one node
after another, each executor call with no transaction open and no lock held; before each
call, once half the lease has gone by, it renews the leases of the nodes it still holds, and
while a call runs a heartbeat thread renews them every third of a lease, so a node waiting its
turn, or a venue call slower than a lease, is never taken for abandoned while its worker
lives. A result is applied only if its lease is still ours (``results``).

A node whose worker died stops being renewed: once its lease expires the reaper moves it on.
PREPARING/AWAITING_SIGNATURE go back to READY (nothing left the building); SUBMITTING goes to
UNKNOWN (it may have), to be reconciled through ``recover``, never submitted again.
"""

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import DateTimeField, F, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from movements.executors.base import LeaseLost
from movements.instruments import lease_reaped
from movements.models import MovementRequest, MovementRequestNode
from movements.services.attention import attention_raise
from movements.services.execution.outcomes import REAPED, NodeFacts, Then, Timing, lease_expired
from movements.services.progress import apply_request_state_from_nodes
from movements.services.state import save_leases, set_node_state
from movements.states import IN_FLIGHT_NODE_STATES, NodeState
from qtg.core.actors import Actor

if TYPE_CHECKING:
    from movements.services.execution.claims import Claim

logger = logging.getLogger(__name__)


def lease_until() -> Any:
    return timezone.now() + timedelta(seconds=settings.QTG_LEASE_SECONDS)


def take_lease(node: MovementRequestNode, owner: str) -> None:
    """Give ``node`` (locked by the caller) to ``owner`` for a lease, under a new epoch (the
    fencing token); the caller saves it (``LEASE_FIELDS``)."""
    now = timezone.now()
    node.lease_owner = owner
    node.lease_epoch += 1
    node.lease_expires_at = now + timedelta(seconds=settings.QTG_LEASE_SECONDS)
    node.heartbeat_at = now


# Time a lease must still have when a fenced call is let out, on top of the call's own
# timeout (clock and statement latency between the worker and the reaper).
FENCE_MARGIN_SECONDS = 2.0


def lease_outlasting(deadline: datetime) -> datetime:
    """A lease that outlasts a fenced call's ``deadline`` (never shorter than a plain lease)."""
    return max(lease_until(), deadline + timedelta(seconds=FENCE_MARGIN_SECONDS))


def renewed_lease() -> Any:
    """A renewed lease (for a row update): a plain lease, or longer while a fenced call is
    in flight, so a renewal never takes back the time the fence promised that call."""
    plain = Value(lease_until(), output_field=DateTimeField())
    fenced = F("fenced_until") + timedelta(seconds=FENCE_MARGIN_SECONDS)
    return Greatest(plain, Coalesce(fenced, plain), output_field=DateTimeField())


# How long after the compare-and-set to SUBMITTING (which fences in the same statement) the
# executor's own fence may use that proof instead of a statement of its own. The compare-and-set
# records a deadline this much later than the call's timeout, so a call let out within the
# window ends before the deadline recovery reads, exactly as if it had been fenced then.
FENCE_REUSE_SECONDS = 1.0


class Fence:
    """``ExecutionContext.fence`` for one claimed node (see there): proves the lease, in one
    statement, right before a side-effecting call leaves the process.

    The compare-and-set that moves the node to SUBMITTING is such a statement (``proven``):
    an executor that fences right after it, within ``FENCE_REUSE_SECONDS`` by the monotonic
    clock (which runs on while a process is paused), for no longer a timeout and with nothing
    to run under the fence, is let out on that proof, once, without a second round trip.
    Nobody can take a live lease, and the proof left it more than the call's timeout."""

    def __init__(self, node_id: int, owner: str, epoch: int) -> None:
        self.node_id, self.owner, self.epoch = node_id, owner, epoch
        self._proof: tuple[float, float, datetime] | None = None

    def proven(self, *, at: float, timeout: float, deadline: datetime) -> None:
        """The lease was proven (at monotonic time ``at``, before the proving statement was
        sent) for a call of ``timeout`` seconds with ``deadline`` recorded on the node."""
        self._proof = (at, timeout, deadline)

    def _fresh_proof(self, timeout: float) -> datetime | None:
        proof, self._proof = self._proof, None
        if proof is None:
            return None
        at, proven_timeout, deadline = proof
        if float(timeout) > proven_timeout or time.monotonic() - at > FENCE_REUSE_SECONDS:
            return None
        return deadline

    def __call__(self, timeout: float, then: Callable[[], None] | None = None) -> datetime:
        if then is None and (deadline := self._fresh_proof(timeout)) is not None:
            return deadline
        now = timezone.now()
        deadline = now + timedelta(seconds=float(timeout))
        with transaction.atomic():
            proved = MovementRequestNode.objects.filter(
                pk=self.node_id,
                lease_owner=self.owner,
                lease_epoch=self.epoch,
                node_state__in=IN_FLIGHT_NODE_STATES,
                lease_expires_at__gt=now,
            ).update(
                fenced_at=now,
                fenced_until=deadline,
                lease_expires_at=lease_outlasting(deadline),
                updated_at=now,
            )
            if proved != 1:
                raise LeaseLost(
                    f"node {self.node_id}: lease {self.owner!r} epoch {self.epoch} is no "
                    "longer held; nothing was sent"
                )
            if then is not None:
                then()
        return deadline


class LeaseKeeper:
    """Renews the leases of a batch a worker runs one node after another (see above). Used as
    a context manager it also keeps a heartbeat: a thread that renews them every third of a
    lease for as long as the block (and so the process) lives."""

    def __init__(self, claims: list["Claim"]) -> None:
        self.claims = claims
        self.renew_at = timezone.now() + timedelta(seconds=settings.QTG_LEASE_SECONDS / 2)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The worker's own connection (this thread's): the heartbeat stays quiet while it is
        # inside a transaction, which would hold the rows (or, on SQLite, the file) it renews.
        self._worker_connection = connections[DEFAULT_DB_ALIAS]

    def __enter__(self) -> "LeaseKeeper":
        if self.claims:
            self._thread = threading.Thread(
                target=self._heartbeat, name="qtg-lease-heartbeat", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _heartbeat(self) -> None:
        interval = settings.QTG_LEASE_SECONDS / 3
        try:
            while not self._stop.wait(interval):
                if self._worker_connection.in_atomic_block:
                    continue
                try:
                    self.renew()
                except Exception:
                    # The next beat tries again; a lease that does lapse is the reaper's, and
                    # the result is then kept as evidence, never applied twice.
                    logger.warning("lease heartbeat failed", exc_info=True)
        finally:
            connection.close()  # this thread's own connection

    def tick(self) -> None:
        """Before an executor call: renew the leases still ours, once half the lease is gone."""
        if timezone.now() >= self.renew_at:
            self.renew()

    def renew(self) -> None:
        """Renew the leases of the claims still ours now."""
        with self._lock:
            self._renew()

    def _renew(self) -> None:
        now = timezone.now()
        if not self.claims:
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
            save_leases(held, expires_at=renewed_lease(), heartbeat_at=now)
        if held == ours:
            self.renew_at = now + timedelta(seconds=settings.QTG_LEASE_SECONDS / 2)


def reap_expired_leases(*, actor: Actor | None = None, limit: int = 500) -> int:
    """Nodes whose worker stopped renewing its lease: PREPARING/AWAITING_SIGNATURE go back to
    READY (nothing left the building), SUBMITTING goes to UNKNOWN (it may have), to be
    reconciled by recovery and never submitted again. Returns how many moved."""
    actor = actor or Actor.sweep("lease-reaper")
    now = timezone.now()
    candidates = list(
        MovementRequestNode.objects.current()
        .filter(node_state__in=list(REAPED), lease_expires_at__lte=now)
        .values_list("pk", "request_id")[:limit]
    )
    moved = 0
    for node_pk, request_pk in candidates:
        with transaction.atomic():
            # A row someone holds is skipped, never waited for: its holder is at work on it
            # (or paused inside a transaction, which no waiting would end), and the next
            # round, on this worker or another, looks again. One held row never holds up the
            # reaping of every other node.
            request = (
                MovementRequest.objects.select_for_update(skip_locked=True, no_key=True)
                .filter(pk=request_pk)
                .first()
            )
            node = (
                MovementRequestNode.objects.select_for_update(
                    skip_locked=True, of=("self",), no_key=True
                )
                .filter(pk=node_pk)
                .first()
            )
            if request is None or node is None:
                continue
            node.request = request
            if (
                node.node_state not in REAPED
                or node.lease_expires_at is None
                or (node.lease_expires_at > timezone.now())
            ):
                continue
            facts = NodeFacts(
                state=NodeState(node.node_state),
                dispatch_count=node.dispatch_count,
                lease_owner=node.lease_owner,
                lease_expires_at=node.lease_expires_at,
                result=node.result or {},
            )
            now = timezone.now()
            outcome = lease_expired(facts, now=now, timing=Timing.from_settings(settings))
            for name, value in outcome.fields.items():
                setattr(node, name, value)
            # How late this reaper came: on the node's event and in qtg_reap_lag_seconds.
            lag = (now - facts.lease_expires_at).total_seconds()
            set_node_state(
                node=node,
                new_state=outcome.target,
                actor=actor,
                detail={**outcome.detail, "reap_lag_seconds": round(lag, 3)},
                update_fields=list(outcome.fields),
            )
            if outcome.attention is not None:
                attention_raise(
                    request=request,
                    node=node,
                    reason=outcome.attention["reason"],
                    message=outcome.attention["message"],
                    evidence=outcome.attention["evidence"],
                    since=now,
                    actor=actor,
                )
            if outcome.then is Then.DERIVE:
                apply_request_state_from_nodes(request, actor=actor)
            transaction.on_commit(partial(lease_reaped, lag_seconds=lag))
            moved += 1
    return moved

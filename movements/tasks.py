"""Celery tasks: thin wrappers over ``movements.services.execution`` and the lifecycle.

Beat sends each periodic task once per tick. The sweeps claim work with SKIP LOCKED, so any
number of them may run at once on any number of workers: when more is due than one sweep's
first claim takes, the tick fans out extra sweeps (``fanout=False``) for the other workers to
pick up (``extra_sweeps``).
"""

import logging
import math

from celery import shared_task
from django.conf import settings

from movements.services import execution
from movements.services.attention import detect_stuck_nodes
from movements.services.decisions import expire_overdue_approvals
from movements.services.intake import idempotency_keys_purge
from qtg.core.actors import Actor

logger = logging.getLogger(__name__)

TIME_LIMITS = {"soft_time_limit": 240, "time_limit": 300}


def extra_sweeps(due: int, actions: int = 0) -> int:
    """How many sweeps of a phase to send beside the one running when ``due`` nodes are due,
    ``actions`` of them action nodes that a first claim takes at most
    ``QTG_CLAIM_FIRST_ACTIONS`` of (dispatch): one for each further first claim's worth (a
    sweep starts with a claim of ``QTG_CLAIM_BATCH_MIN`` nodes, or of its limit if smaller),
    and at least one for each further first claim's share of the action nodes, so an idle
    worker takes each at once; at most ``QTG_SWEEP_FANOUT - 1``. What the running sweep's
    first claim takes whole sends none: another sweep would find nothing and cost a worker a
    task, a reaping and an empty claim."""
    needed = math.ceil(due / max(1, execution.first_claim_size(settings.QTG_DISPATCH_BATCH)))
    if actions and settings.QTG_CLAIM_FIRST_ACTIONS > 0:
        needed = max(needed, math.ceil(actions / settings.QTG_CLAIM_FIRST_ACTIONS))
    return max(0, min(settings.QTG_SWEEP_FANOUT - 1, needed - 1))


def _fan_out(task, phase: str, fanout: bool) -> None:
    if not fanout:
        return
    due, actions = execution.due_counts(phase=phase)
    for _ in range(extra_sweeps(due, actions if phase == "dispatch" else 0)):
        task.apply_async(kwargs={"fanout": False})


@shared_task(name="movements.dispatch_ready", ignore_result=True, **TIME_LIMITS)
def dispatch_ready(fanout: bool = True) -> int:
    """Dispatch due READY nodes of approved/executing requests."""
    _fan_out(dispatch_ready, "dispatch", fanout)
    return execution.dispatch_ready_nodes(limit=settings.QTG_DISPATCH_BATCH)


@shared_task(name="movements.observe_submitted", ignore_result=True, **TIME_LIMITS)
def observe_submitted(fanout: bool = True) -> int:
    """Observe due SUBMITTED/OBSERVING nodes."""
    _fan_out(observe_submitted, "observe", fanout)
    return execution.observe_submitted_nodes(limit=settings.QTG_DISPATCH_BATCH)


@shared_task(name="movements.recover_unknown", ignore_result=True, **TIME_LIMITS)
def recover_unknown(fanout: bool = True) -> int:
    """Reconcile UNKNOWN nodes with their venues."""
    _fan_out(recover_unknown, "recover", fanout)
    return execution.recover_unknown_nodes(limit=settings.QTG_DISPATCH_BATCH)


@shared_task(name="movements.reap_leases", ignore_result=True, **TIME_LIMITS)
def reap_leases() -> int:
    """Expired leases: PREPARING/AWAITING_SIGNATURE -> READY, SUBMITTING -> UNKNOWN."""
    return execution.reap_expired_leases(actor=Actor.sweep("lease-reaper"))


@shared_task(name="movements.detect_stuck", ignore_result=True, **TIME_LIMITS)
def detect_stuck() -> int:
    """Nodes waiting on a venue longer than expected: their movements need attention."""
    return detect_stuck_nodes(actor=Actor.sweep("stuck-detector"))


@shared_task(name="movements.expire_approvals", ignore_result=True, **TIME_LIMITS)
def expire_approvals() -> int:
    """PENDING_APPROVAL requests past their expiry -> EXPIRED."""
    return expire_overdue_approvals(actor=Actor.sweep("approval-expiry"))


@shared_task(name="movements.purge_idempotency_keys", ignore_result=True, **TIME_LIMITS)
def purge_idempotency_keys() -> int:
    """Forget idempotency keys past their retention (QTG_IDEMPOTENCY_KEY_RETENTION_DAYS)."""
    return idempotency_keys_purge()

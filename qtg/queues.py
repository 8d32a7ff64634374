"""One Celery queue per concern, named from the deployment's queue (``QTG_CELERY_QUEUE``):

- ``<q>``: the bookkeeping sweeps (reap leases, expire approvals, detect stuck nodes, purge
  idempotency keys, queue due webhook deliveries) and anything not routed below;
- ``<q>.venues``: the sweeps that call venues (dispatch READY nodes, observe SUBMITTED ones,
  recover UNKNOWN ones, watch concluded chain transfers), whose time is the venues' to spend;
- ``<q>.webhooks``: webhook deliveries, test deliveries included (rate-limited per client at
  the API), each bounded by the delivery time limits, and notifications (emails, chat posts).

Each has its own worker (the Procfile's ``worker``, ``worker-venues``, ``worker-webhooks``;
``make run`` starts the same lines), so a slow receiver or a flood of test deliveries holds
only the webhook worker and a slow venue only the venue worker. Deriving the names from one
prefix keeps "one queue name per deployment" (and per test cluster) working.
"""

SWEEPS, VENUES, WEBHOOKS = "sweeps", "venues", "webhooks"
SUFFIX = {SWEEPS: "", VENUES: ".venues", WEBHOOKS: ".webhooks"}

# Task name -> concern (tasks not named here go to the sweeps queue, Celery's default).
CONCERN_OF_TASK = {
    "movements.dispatch_ready": VENUES,
    "movements.observe_submitted": VENUES,
    "movements.recover_unknown": VENUES,
    "venues.watch_concluded": VENUES,
    "callbacks.deliver": WEBHOOKS,
    # an email or a chat post: outbound like a webhook, bounded by the same kind of timeouts
    "notifications.send": WEBHOOKS,
}


def queue_name(base: str, concern: str) -> str:
    return base + SUFFIX[concern]


def all_queues(base: str) -> list[str]:
    """Every queue a deployment named ``base`` sends to (what its workers must consume)."""
    return [queue_name(base, concern) for concern in SUFFIX]


def task_routes(base: str) -> dict[str, dict[str, str]]:
    """Celery's ``task_routes`` for the deployment named ``base``."""
    return {task: {"queue": queue_name(base, c)} for task, c in CONCERN_OF_TASK.items()}

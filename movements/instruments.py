"""What the movements domain tells operators about itself while it runs: one INFO log line per
state transition, a transition counter and latency histograms (transitions, venue calls).

The counters and histograms live in prometheus-client's registry of the process that counts
them; ``/metrics`` (``ops``) adds up every process of the machine through prometheus-client's
multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``, see ``qtg/settings.py``).
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from prometheus_client import Counter, Histogram

from qtg.core.actors import Actor

logger = structlog.get_logger("movements.transitions")
venue_logger = structlog.get_logger("movements.venues")

TRANSITIONS = Counter(
    "qtg_transitions",
    "State transitions written, by subject (node or request) and edge.",
    ["subject", "from_state", "to_state"],
)
TRANSITION_SECONDS = Histogram(
    "qtg_transition_seconds",
    "Time to validate, apply and write one state transition with its audit event.",
    ["subject"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
VENUE_CALL_SECONDS = Histogram(
    "qtg_venue_call_seconds",
    "Duration of one executor call to a venue, by executor, method and outcome.",
    ["executor", "method", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)

VENUE_ERRORS = Counter(
    "qtg_venue_errors",
    "Executor calls to a venue that raised, by executor, method and error class (the "
    "taxonomy's: TransientError, AmbiguousError, DeterministicError, ...).",
    ["executor", "method", "error"],
)
REAP_LAG_SECONDS = Histogram(
    "qtg_reap_lag_seconds",
    "How long after its lease expired a dead worker's node was moved on by a reaper.",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)


def lease_reaped(*, lag_seconds: float) -> None:
    """Count one reaped lease and how late the reaper came to it."""
    REAP_LAG_SECONDS.observe(max(0.0, lag_seconds))


def transition_committed(
    *,
    subject: str,
    movement_id: Any,
    node_key: str,
    attempt: int | None,
    old_state: str,
    new_state: str,
    actor: Actor,
    seconds: float,
) -> None:
    """Count and log one transition once it is durable (called from ``on_commit``)."""
    TRANSITIONS.labels(subject, str(old_state), str(new_state)).inc()
    TRANSITION_SECONDS.labels(subject).observe(seconds)
    where = f"node {node_key}" if node_key else "request"
    logger.info(
        f"movement {movement_id} {where}: {old_state} → {new_state} by {actor.type}:{actor.id}",
        movement_id=str(movement_id),
        node_key=node_key,
        attempt=attempt,
        old_state=str(old_state),
        new_state=str(new_state),
        actor=f"{actor.type}:{actor.id}",
    )


@contextmanager
def venue_call(*, executor: str, method: str, context: Any) -> Iterator[None]:
    """Time one executor call, with the node it is about bound to every log line inside."""
    started = time.perf_counter()
    outcome = "error"
    with structlog.contextvars.bound_contextvars(
        movement_id=str(context.request_id), node_key=context.node_key, attempt=context.attempt
    ):
        try:
            yield
            outcome = "ok"
        except BaseException as exc:
            VENUE_ERRORS.labels(executor, method, type(exc).__name__).inc()
            raise
        finally:
            seconds = time.perf_counter() - started
            VENUE_CALL_SECONDS.labels(executor, method, outcome).observe(seconds)
            venue_logger.debug(
                f"{executor}.{method} {outcome} in {seconds:.3f}s",
                executor=executor,
                method=method,
                outcome=outcome,
            )

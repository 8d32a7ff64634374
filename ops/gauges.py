"""The gauges Prometheus scrapes, computed on a schedule (``ops.refresh_gauges``, every
``QTG_GAUGES_SECONDS``) and stored in one ``GaugeSnapshot`` row; a scrape reads that row.

What they count: movements by state, money in flight, nodes UNKNOWN (and the oldest), the
oldest movement waiting in MANUAL_INTERVENTION, movements needing attention, how far the
workers are behind, dead webhook deliveries, each Celery queue's depth, each chain sender's
nonce queue, each exchange account's clock.
"""

import contextlib
import logging
import time
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Min
from django.utils import timezone

from movements.models import MovementRequest, MovementRequestNode
from movements.states import NodeState, RequestState
from ops import venue_probe
from ops.console import money_in_transit
from ops.models import GaugeSnapshot
from ops.status import snapshot

logger = logging.getLogger(__name__)

# A chain transaction holding its sender's nonce and not yet in a block.
WAITING_TX_STATES = ("CREATED", "SIGNED", "BROADCAST", "PENDING")


def _age(now: datetime, since: datetime | None) -> float:
    return max(0.0, (now - since).total_seconds()) if since else 0.0


def queue_depths(names: list[str] | None = None) -> dict[str, int]:
    """Messages waiting in each queue (by default those this deployment's workers consume: a
    passive declare on the broker; a queue the broker does not know is left out)."""
    from qtg.celery import app

    names = sorted(names or set(app.amqp.queues) or {settings.CELERY_TASK_DEFAULT_QUEUE})
    depths: dict[str, int] = {}
    try:
        with app.connection_for_read() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
            for name in names:
                channel = connection.channel()
                # A queue the broker does not know is no depth; a channel it closed, no matter.
                with contextlib.suppress(Exception):
                    depths[name] = int(channel.queue_declare(queue=name, passive=True)[1])
                with contextlib.suppress(Exception):
                    channel.close()
    except Exception:  # the broker down is /health/ready's to report
        logger.warning("queue depths: the broker could not be asked", exc_info=True)
    return depths


def sender_queues(now: datetime) -> list[dict[str, Any]]:
    """Per chain sender: the next nonce it will use, how many of its transactions wait for a
    block, the lowest nonce among them and how long the oldest has waited."""
    from venues.models import ChainTransaction, NonceCursor

    rows = (
        ChainTransaction.objects.filter(state__in=WAITING_TX_STATES)
        .values("chain", "sender")
        .annotate(waiting=Count("pk"), lowest=Min("nonce"), since=Min("created_at"))
        .order_by()
    )
    found = {(r["chain"], r["sender"]): r for r in rows}
    cursors = {(c.chain, c.sender): c.next_nonce for c in NonceCursor.objects.all()}
    queues = []
    for key in sorted(set(found) | set(cursors)):
        row = found.get(key, {})
        queues.append(
            {
                "chain": key[0],
                "sender": key[1],
                "next_nonce": cursors.get(key),
                "waiting": row.get("waiting", 0),
                "lowest_waiting_nonce": row.get("lowest"),
                "oldest_waiting_seconds": _age(now, row.get("since")),
            }
        )
    return queues


def exchange_clocks() -> list[dict[str, Any]]:
    from venues.cex.models import CexClock

    return [
        {
            "exchange": clock.exchange,
            "account": clock.account,
            "skew_seconds": clock.skew_ms / 1000,
            "uncertainty_seconds": clock.uncertainty_ms / 1000,
            "measured_at": clock.measured_at.timestamp(),
        }
        for clock in CexClock.objects.order_by("account")
    ]


def audit_gauges(now) -> dict[str, float]:
    """The evidence chain's newest bounded verification (``ops.audit``)."""
    from ops.audit import audit_status

    status = audit_status()
    if status is None:
        return {"audit_chain_breaks": -1, "audit_verified_age_seconds": -1}
    return {
        "audit_chain_breaks": len(status.breaks),
        "audit_verified_age_seconds": _age(now, status.checked_at),
    }


def compute() -> dict[str, Any]:
    """Every gauge, read now (the heavy part: several counting queries)."""
    now = timezone.now()
    numbers = snapshot()
    oldest_unknown = (
        MovementRequestNode.objects.current()
        .filter(node_state=NodeState.UNKNOWN)
        .aggregate(since=Min("state_changed_at"))["since"]
    )
    oldest_manual = MovementRequest.objects.filter(
        request_state=RequestState.MANUAL_INTERVENTION
    ).aggregate(since=Min("state_changed_at"))["since"]
    return {
        "movements_by_state": numbers.movements_by_state,
        "in_flight_by_asset": {a: str(total) for a, total in numbers.in_flight_by_asset.items()},
        "nodes_unknown": numbers.nodes_unknown,
        "oldest_unknown_seconds": _age(now, oldest_unknown),
        "oldest_manual_intervention_seconds": _age(now, oldest_manual),
        "movements_needing_attention": numbers.movements_needing_attention,
        "oldest_due_seconds": numbers.oldest_due_seconds,
        "dead_deliveries": numbers.dead_deliveries,
        **audit_gauges(now),
        "queue_depths": queue_depths(),
        "sender_queues": sender_queues(now),
        "exchange_clocks": exchange_clocks(),
        # For the console's home page: chain heads per endpoint and Iris reachability, and
        # the money in transit hour by hour (a day's history: too heavy for a page view).
        "venue_probe": venue_probe.probe(),
        "money_in_transit": {
            asset: [[hour.isoformat(), str(total)] for hour, total in series]
            for asset, series in money_in_transit(now=now).items()
        },
    }


def refresh() -> GaugeSnapshot:
    """Compute the gauges and store them (the periodic task's body)."""
    started = time.perf_counter()
    values = compute()
    row, _ = GaugeSnapshot.objects.update_or_create(
        name="current",
        defaults={
            "computed_at": timezone.now(),
            "seconds": time.perf_counter() - started,
            "values": values,
        },
    )
    return row


def current() -> GaugeSnapshot:
    """The stored gauges (computed now, once, when none were ever stored)."""
    row = GaugeSnapshot.objects.filter(name="current").first()
    return row if row is not None else refresh()

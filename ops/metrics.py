"""``/metrics`` for Prometheus: the gauges the scheduler last computed (``ops/gauges.py``, one
row read per scrape; a scrape without the database answers 503), the build, the serving
process, plus the counters and histograms every process of this machine keeps (transitions, venue
calls; ``movements/instruments.py``) through prometheus-client's multiprocess directory.

When ``QTG_METRICS_TOKEN`` is set, a scrape must send ``Authorization: Bearer <token>``; without
one, /metrics answers only where ``QTG_METRICS_OPEN`` is on (the embedded default).
"""

import hmac
import os

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from ops import gauges


def _gauge(name: str, doc: str, value: float | None = None, labels: list[str] | None = None):
    if labels:
        return GaugeMetricFamily(name, doc, labels=labels)
    return GaugeMetricFamily(name, doc, value=value or 0.0)


class GaugeCollector:
    """The gauges of the last ``ops.refresh_gauges`` run (one row read per scrape), and how
    old they are."""

    def collect(self):
        row = gauges.current()
        values = row.values
        yield _gauge(
            "qtg_gauges_age_seconds",
            "How long ago the gauges below were computed (the scheduler refreshes them).",
            max(0.0, (timezone.now() - row.computed_at).total_seconds()),
        )
        yield _gauge(
            "qtg_gauges_compute_seconds", "How long computing the gauges took.", row.seconds
        )
        movements = _gauge("qtg_movements", "Movements by request state.", labels=["state"])
        for state, count in sorted(values.get("movements_by_state", {}).items()):
            movements.add_metric([state], count)
        yield movements
        # Money as a float is fine for a chart; the ledger itself stays Decimal.
        in_flight = _gauge(
            "qtg_amount_in_flight",
            "Sum of HELD reservations (money a movement may still move), by asset.",
            labels=["asset"],
        )
        for asset, total in sorted(values.get("in_flight_by_asset", {}).items()):
            in_flight.add_metric([asset], float(total))
        yield in_flight
        for name, key, doc in SCALARS:
            yield _gauge(name, doc, values.get(key, 0.0))
        depth = _gauge("qtg_queue_depth", "Messages waiting in a Celery queue.", labels=["queue"])
        for queue, count in sorted(values.get("queue_depths", {}).items()):
            depth.add_metric([queue], count)
        yield depth
        yield from _per_row(values.get("sender_queues", []), ["chain", "sender"], SENDER_QUEUE)
        yield from _per_row(
            values.get("exchange_clocks", []), ["exchange", "account"], EXCHANGE_CLOCK
        )


SCALARS = (
    (
        "qtg_nodes_unknown",
        "nodes_unknown",
        "Current nodes in UNKNOWN (a venue call whose outcome is not known yet).",
    ),
    (
        "qtg_oldest_unknown_node_seconds",
        "oldest_unknown_seconds",
        "How long the oldest UNKNOWN node has been UNKNOWN (0: none is).",
    ),
    (
        "qtg_oldest_manual_intervention_seconds",
        "oldest_manual_intervention_seconds",
        "How long the oldest movement in MANUAL_INTERVENTION has waited for a person.",
    ),
    (
        "qtg_movements_needing_attention",
        "movements_needing_attention",
        "Movements with an open, unsnoozed attention entry (a person should look).",
    ),
    (
        "qtg_oldest_due_node_seconds",
        "oldest_due_seconds",
        "Age of the longest-waiting node a sweep would pick up now (0: none is due).",
    ),
    (
        "qtg_webhook_deliveries_dead",
        "dead_deliveries",
        "Webhook deliveries that gave up (DEAD): a subscriber missed events.",
    ),
    (
        "qtg_audit_chain_breaks",
        "audit_chain_breaks",
        "Breaks the newest verification of the evidence chain found (0: intact; -1: never run).",
    ),
    (
        "qtg_audit_verified_age_seconds",
        "audit_verified_age_seconds",
        "How long ago the evidence chain was last verified (-1: never).",
    ),
)


def _per_row(rows: list[dict], labels: list[str], columns: tuple[tuple[str, str, str], ...]):
    """One labelled gauge per column (name, doc, the row's key), one sample per row (labels
    read from the row by name); a row whose value is None has no sample."""
    families = [(_gauge(name, doc, labels=labels), key) for name, doc, key in columns]
    for row in rows:
        values = [str(row[label]) for label in labels]
        for family, key in families:
            if row.get(key) is not None:
                family.add_metric(values, row[key])
    yield from (family for family, _ in families)


SENDER_QUEUE = (
    (
        "qtg_sender_waiting_transactions",
        "A chain sender's transactions holding a nonce, not yet in a block.",
        "waiting",
    ),
    (
        "qtg_sender_oldest_waiting_seconds",
        "How long the sender's oldest transaction not yet in a block has waited.",
        "oldest_waiting_seconds",
    ),
    ("qtg_sender_next_nonce", "The next nonce the sender will use.", "next_nonce"),
    (
        "qtg_sender_lowest_waiting_nonce",
        "The lowest nonce among the sender's transactions not yet in a block.",
        "lowest_waiting_nonce",
    ),
)
# Each exchange account's clock as last measured (``venues.cex.clock``). A skew growing
# towards the account's ``max_skew_seconds`` holds withdrawals back: alert before it does.
EXCHANGE_CLOCK = (
    (
        "qtg_exchange_clock_skew_seconds",
        "The exchange's clock minus ours, as last measured for the account.",
        "skew_seconds",
    ),
    (
        "qtg_exchange_clock_uncertainty_seconds",
        "Half the round trip of the last clock measurement (the skew is +/- this).",
        "uncertainty_seconds",
    ),
    (
        "qtg_exchange_clock_measured_timestamp_seconds",
        "When the account's exchange clock was last measured (Unix time).",
        "measured_at",
    ),
)


class BuildCollector:
    """``qtg_build_info``: what is running (1, with the versions as labels)."""

    def collect(self):
        import sys
        from importlib.metadata import PackageNotFoundError, version

        import celery
        import django

        try:
            qtg_version = version("qtg")
        except PackageNotFoundError:
            qtg_version = "unknown"
        info = GaugeMetricFamily(
            "qtg_build_info",
            "The running build: QTG's version and those of Python, Django and Celery.",
            labels=["version", "python", "django", "celery", "profile"],
        )
        info.add_metric(
            [
                qtg_version,
                ".".join(map(str, sys.version_info[:3])),
                django.get_version(),
                celery.__version__,
                settings.QTG_PROFILE,
            ],
            1,
        )
        yield info


def exposition() -> bytes:
    """The text Prometheus scrapes."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(_ProcessRegistry())
    registry.register(GaugeCollector())
    registry.register(BuildCollector())
    # The serving process's own CPU, memory and file descriptors (workers: qtg_worker_*).
    registry.register(ProcessCollector(registry=None))
    return generate_latest(registry)


class _ProcessRegistry:
    """This process's own counters (without a multiprocess directory)."""

    def collect(self):
        return REGISTRY.collect()


def authorised(request: HttpRequest) -> bool:
    token = settings.QTG_METRICS_TOKEN
    if not token:
        # Fail closed: without a token only an explicit QTG_METRICS_OPEN publishes them.
        return settings.QTG_METRICS_OPEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not authorised(request):
        response = HttpResponse("a bearer token is required\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    try:
        body = exposition()
    except DatabaseError:
        # Without the database the gauges are unknown: say so, never serve made-up zeros.
        return HttpResponse("the database is unavailable\n", status=503)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)

"""``/metrics`` for Prometheus: the movement numbers read from the database at each scrape,
plus the counters and histograms every process of this machine keeps (transitions, venue
calls; ``movements/instruments.py``) through prometheus-client's multiprocess directory.

When ``QTG_METRICS_TOKEN`` is set, a scrape must send ``Authorization: Bearer <token>``.
"""

import hmac
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from ops.status import snapshot


class MovementCollector:
    """Gauges computed from the database when Prometheus scrapes."""

    def collect(self):
        now = snapshot()
        movements = GaugeMetricFamily(
            "qtg_movements", "Movements by request state.", labels=["state"]
        )
        for state, count in now.movements_by_state.items():
            movements.add_metric([state], count)
        yield movements
        # Money as a float is fine for a chart; the ledger itself stays Decimal.
        in_flight = GaugeMetricFamily(
            "qtg_amount_in_flight",
            "Sum of HELD reservations (money a movement may still move), by asset.",
            labels=["asset"],
        )
        for asset, total in now.in_flight_by_asset.items():
            in_flight.add_metric([asset], float(total))
        yield in_flight
        yield GaugeMetricFamily(
            "qtg_nodes_unknown",
            "Current nodes in UNKNOWN (a venue call whose outcome is not known yet).",
            value=now.nodes_unknown,
        )
        yield GaugeMetricFamily(
            "qtg_movements_needing_attention",
            "Movements with an open, unsnoozed attention entry (a person should look).",
            value=now.movements_needing_attention,
        )
        yield GaugeMetricFamily(
            "qtg_oldest_due_node_seconds",
            "Age of the longest-waiting node a sweep would pick up now (0: none is due).",
            value=now.oldest_due_seconds,
        )
        yield GaugeMetricFamily(
            "qtg_webhook_deliveries_dead",
            "Webhook deliveries that gave up (DEAD): a subscriber missed events.",
            value=now.dead_deliveries,
        )


def exposition() -> bytes:
    """The text Prometheus scrapes."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(_ProcessRegistry())
    registry.register(MovementCollector())
    return generate_latest(registry)


class _ProcessRegistry:
    """This process's own counters (without a multiprocess directory)."""

    def collect(self):
        return REGISTRY.collect()


def authorised(request: HttpRequest) -> bool:
    token = settings.QTG_METRICS_TOKEN
    if not token:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not authorised(request):
        response = HttpResponse("a bearer token is required\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)

"""What webhook delivery tells operators about itself: each attempt's duration and outcome,
and how long after its event a delivery reached its subscriber (prometheus-client counters and
histograms; ``/metrics`` adds up every process through the multiprocess directory)."""

from prometheus_client import Counter, Histogram

ATTEMPTS = Counter(
    "qtg_webhook_delivery_attempts",
    "Webhook delivery attempts, by outcome (delivered, retrying: failed and due again, dead: "
    "failed for the last time).",
    ["outcome"],
)
ATTEMPT_SECONDS = Histogram(
    "qtg_webhook_delivery_attempt_seconds",
    "Duration of one delivery attempt (the subscriber's answer, or the failure).",
    ["outcome"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
LATENCY_SECONDS = Histogram(
    "qtg_webhook_delivery_latency_seconds",
    "From the event to its delivery's success (retries included).",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 14400),
)


def attempt_recorded(*, outcome: str, seconds: float, latency_seconds: float | None) -> None:
    ATTEMPTS.labels(outcome).inc()
    ATTEMPT_SECONDS.labels(outcome).observe(max(0.0, seconds))
    if latency_seconds is not None:
        LATENCY_SECONDS.observe(max(0.0, latency_seconds))

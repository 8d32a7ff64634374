"""``/health/`` for load balancers and ``qtg_status``: the database, the broker, the beat
heartbeat (age of the last periodic sweep) and a worker answering a ping. JSON; 503 when any
check fails."""

import asyncio
import dataclasses
import datetime

from django.conf import settings
from django.db import DatabaseError, connections
from django.http import JsonResponse
from django.utils import timezone
from health_check.base import HealthCheck, HealthCheckResult
from health_check.checks import Database
from health_check.exceptions import ServiceUnavailable
from health_check.views import HealthCheckView

from ops.heartbeats import last_sweep_at


@dataclasses.dataclass
class Broker(HealthCheck):
    """The Celery broker accepts a connection."""

    timeout: datetime.timedelta = dataclasses.field(
        default=datetime.timedelta(seconds=3), repr=False
    )

    def run(self) -> None:
        from qtg.celery import app

        try:
            with app.connection_for_write(settings.CELERY_BROKER_URL) as connection:
                connection.ensure_connection(
                    max_retries=1, interval_start=0, timeout=self.timeout.total_seconds()
                )
        except Exception as exc:  # kombu raises its transports' own errors
            raise ServiceUnavailable(f"broker unreachable: {type(exc).__name__}") from exc


@dataclasses.dataclass
class BeatHeartbeat(HealthCheck):
    """A periodic sweep finished on a worker recently (beat sends, a worker runs them)."""

    def run(self) -> None:
        age = sweep_age()
        if age is None:
            raise ServiceUnavailable("no periodic sweep has run yet")
        limit = settings.QTG_HEALTH_MAX_SWEEP_AGE_SECONDS
        if age > limit:
            raise ServiceUnavailable(f"last sweep {age:.0f}s ago (limit {limit:.0f}s)")


def sweep_age() -> float | None:
    """Seconds since the last periodic sweep finished (None: never, or no database)."""
    try:
        at = last_sweep_at()
    except DatabaseError as exc:
        raise ServiceUnavailable("database unreachable") from exc
    finally:
        # Checks run in threads of their own: leave no connection behind in them.
        connections["default"].close()
    return None if at is None else (timezone.now() - at).total_seconds()


@dataclasses.dataclass
class Worker(HealthCheck):
    """A Celery worker answers a ping (the first answer is enough)."""

    timeout: datetime.timedelta = dataclasses.field(
        default_factory=lambda: datetime.timedelta(seconds=settings.QTG_HEALTH_PING_SECONDS),
        repr=False,
    )

    def run(self) -> None:
        from qtg.celery import app

        try:
            with app.connection_for_write(settings.CELERY_BROKER_URL) as connection:
                replies = app.control.ping(
                    timeout=self.timeout.total_seconds(), limit=1, connection=connection
                )
        except Exception as exc:  # the broker's own errors
            raise ServiceUnavailable(f"cannot ping: {type(exc).__name__}") from exc
        if not replies:
            raise ServiceUnavailable("no worker answered a ping")


# The check of each name, in the order they are reported.
CHECKS = {
    "database": Database,
    "broker": Broker,
    "beat": BeatHeartbeat,
    "worker": Worker,
}


async def run_checks() -> dict[str, HealthCheckResult]:
    """Every check, at once; each result by its name."""
    results = await asyncio.gather(*(make().get_result() for make in CHECKS.values()))
    return dict(zip(CHECKS, results, strict=True))


def report(results: dict[str, HealthCheckResult]) -> dict:
    """The JSON body: overall status and one entry per check."""
    return {
        "status": "fail" if any(r.error for r in results.values()) else "ok",
        "checks": {
            name: {
                "status": "fail" if result.error else "ok",
                "detail": str(result.error) if result.error else "OK",
                "seconds": round(result.time_taken, 3),
            }
            for name, result in results.items()
        },
    }


class HealthView(HealthCheckView):
    """JSON for load balancers whatever they accept; 503 when any check fails."""

    async def get(self, request, *args, **kwargs):
        body = report(await run_checks())
        return JsonResponse(body, status=200 if body["status"] == "ok" else 503)

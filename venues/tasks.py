"""Celery tasks of the real venues: thin wrappers over their services."""

from celery import shared_task

from venues.evm.watch import watch_concluded as _watch_concluded

TIME_LIMITS = {"soft_time_limit": 240, "time_limit": 300}


@shared_task(name="venues.watch_concluded", ignore_result=True, **TIME_LIMITS)
def watch_concluded() -> int:
    """Concluded (FAILED) EVM transfers whose transactions could still be mined, looked at."""
    return _watch_concluded()

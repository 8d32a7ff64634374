"""Celery tasks of the real venues: thin wrappers over their services, each imported when the
task runs (a worker loads this module at start: web3 and the other venue client libraries are
not imported until a venue is used, tests/venues/test_app.py)."""

from celery import shared_task

TIME_LIMITS = {"soft_time_limit": 240, "time_limit": 300}


@shared_task(name="venues.watch_concluded", ignore_result=True, **TIME_LIMITS)
def watch_concluded() -> int:
    """Concluded (FAILED) EVM transfers whose transactions could still be mined, looked at."""
    from venues.evm.watch import watch_concluded as _watch_concluded

    return _watch_concluded()

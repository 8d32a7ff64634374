"""Periodic work of the ops app (thin tasks over ops/gauges.py and ops/audit.py)."""

from celery import shared_task

from ops import audit, gauges

AUDIT_TIME_LIMITS = {"soft_time_limit": 240, "time_limit": 300}


@shared_task(name="ops.refresh_gauges", ignore_result=True, soft_time_limit=60, time_limit=90)
def refresh_gauges() -> float:
    """Recompute the gauges ``/metrics`` serves; returns how long that took (seconds)."""
    return gauges.refresh().seconds


@shared_task(name="ops.audit_checkpoint", ignore_result=True, **AUDIT_TIME_LIMITS)
def audit_checkpoint() -> int:
    """Write a signed audit checkpoint; returns its sequence number."""
    return audit.audit_checkpoint()["seq"]


@shared_task(name="ops.audit_verify_recent", ignore_result=True, **AUDIT_TIME_LIMITS)
def audit_verify_recent() -> int:
    """Verify the newest evidence rows; returns how many breaks were found."""
    return len(audit.audit_verify_recent().breaks)

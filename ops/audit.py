"""The evidence chain's periodic work (beat): a signed checkpoint, and a bounded verification
of the newest rows whose result is a health detail and a metric."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from ops.models import AuditStatus
from qtg.core.checkpoints import checkpoint_write, verify_recent

RECENT = "recent"


def audit_verify_recent() -> AuditStatus:
    """Verify what was written since twice the interval (at most the limit per table), and
    against the latest checkpoint; store the result."""
    window = timedelta(seconds=max(settings.QTG_AUDIT_VERIFY_SECONDS, 1) * 2)
    result = verify_recent(since=window, limit=settings.QTG_AUDIT_VERIFY_LIMIT)
    status, _ = AuditStatus.objects.update_or_create(
        name=RECENT,
        defaults={
            "checked_at": timezone.now(),
            "rows": result.rows,
            "breaks": result.lines()[:50],
            "checkpoint_seq": result.checkpoint_seq,
        },
    )
    return status


def audit_checkpoint(*, reason: str = "beat") -> dict:
    """Take a signed checkpoint (file and log line) and send it to webhook subscribers."""
    from callbacks.services import audit_checkpoint_enqueue

    checkpoint = checkpoint_write(reason=reason)
    audit_checkpoint_enqueue(checkpoint=checkpoint)
    return checkpoint


def audit_status() -> AuditStatus | None:
    return AuditStatus.objects.filter(name=RECENT).first()

from django.db import models


class SweepHeartbeat(models.Model):
    """When a periodic task beat sends last finished on a worker. Its age is the health of
    the periodic machinery as a whole: beat sending, the broker carrying, a worker running."""

    task = models.CharField(max_length=100, primary_key=True)
    last_run_at = models.DateTimeField()
    worker = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["task"]

    def __str__(self) -> str:
        return f"{self.task} at {self.last_run_at:%Y-%m-%d %H:%M:%S}"


class WorkerHeartbeat(models.Model):
    """A running Celery worker, stamped every ``QTG_HEARTBEAT_WRITE_SECONDS`` while it lives:
    readiness counts the workers of each queue from these rows (no broker round trip)."""

    hostname = models.CharField(max_length=200, primary_key=True)
    queues = models.JSONField(default=list)
    pid = models.IntegerField(default=0)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return f"{self.hostname} {self.queues} at {self.last_seen_at:%H:%M:%S}"


class LeaderLease(models.Model):
    """Who leads a role (``beat``: sends the periodic sweeps) until when (``qtg/leader.py``).
    Any candidate takes over a lease its holder stopped renewing."""

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=200)
    expires_at = models.DateTimeField()
    acquired_at = models.DateTimeField()
    renewed_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name}: {self.holder} until {self.expires_at:%H:%M:%S}"


class GaugeSnapshot(models.Model):
    """The gauges ``/metrics`` serves, computed by a periodic task (``ops.refresh_gauges``)
    and read by a scrape in one query: a scrape never runs the counting queries itself. Its
    age is served too (``qtg_gauges_age_seconds``): stale numbers say so."""

    name = models.CharField(max_length=32, primary_key=True, default="current")
    computed_at = models.DateTimeField()
    seconds = models.FloatField(default=0.0)  # how long computing them took
    values = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"gauges at {self.computed_at:%Y-%m-%d %H:%M:%S}"


class AuditStatus(models.Model):
    """The result of the newest bounded verification of the evidence chain (beat's
    ``ops.audit_verify_recent``): a health detail and the ``qtg_audit_chain_breaks`` metric."""

    name = models.CharField(max_length=32, primary_key=True)
    checked_at = models.DateTimeField()
    rows = models.PositiveIntegerField(default=0)
    breaks = models.JSONField(default=list, blank=True)
    checkpoint_seq = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name_plural = "audit status"

    def __str__(self) -> str:
        return f"{self.name}: {len(self.breaks)} break(s) at {self.checked_at:%Y-%m-%d %H:%M:%S}"

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

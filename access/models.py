"""API tokens, stored as a SHA-256 digest (the key itself is shown once, when minted), each
with an expiry; and the append-only record of who minted or revoked which token."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from qtg.core.models import AppendOnlyModel


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    # The first characters of the key: enough for an operator to tell tokens apart.
    prefix = models.CharField(max_length=8, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=100, blank=True, help_text="What the token is for.")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    def is_usable(self, now=None) -> bool:
        return self.revoked_at is None and (now or timezone.now()) < self.expires_at


class ApiTokenEvent(AppendOnlyModel):
    class Action(models.TextChoices):
        MINTED = "minted", "Minted"
        REVOKED = "revoked", "Revoked"

    token = models.ForeignKey(ApiToken, on_delete=models.PROTECT, related_name="events")
    action = models.CharField(max_length=16, choices=Action.choices)
    # Who did it (blank: a management command run on the server), and for whom.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor_label = models.CharField(max_length=150, blank=True)
    subject = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    for_someone_else = models.BooleanField(default=False)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.token} by {self.actor_label or self.actor}"

"""API tokens, stored as a SHA-256 digest (the key itself is shown once, when minted), each
with an expiry; and the append-only record of who minted or revoked which token."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from qtg.core.chain import linked_constraint
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
    # Issue 29: who minted it, whether for someone else (such a token never decides), what it
    # may do, the owner's second-factor proof at minting, and the second superuser who made a
    # token minted for someone else usable (access/services.py).
    minted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    minted_for_other = models.BooleanField(default=False)
    scopes = models.JSONField(default=list, help_text="read, create, decide")
    second_factor_at = models.DateTimeField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    activated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        permissions = [("activate_apitoken", "Can activate a token minted for someone else")]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    def is_usable(self, now=None) -> bool:
        return (
            self.revoked_at is None
            and self.activated_at is not None
            and (now or timezone.now()) < self.expires_at
        )

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


class ApiTokenEvent(AppendOnlyModel):
    class Action(models.TextChoices):
        MINTED = "minted", "Minted"
        # A token minted for someone else made usable by a second superuser.
        ACTIVATED = "activated", "Activated"
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

    chain_stream = "token_id"
    chain_subject_has_rows = True  # minted with its "minted" event

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [linked_constraint("apitokenevent")]

    def __str__(self) -> str:
        return f"{self.action} {self.token} by {self.actor_label or self.actor}"

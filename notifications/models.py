"""What each person wants to be told (``NotificationPreference``) and the outbox of what is
being told (``Notification``: a row written in the transaction of the event, sent by a worker)."""

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class Kind(models.TextChoices):
    """What a person may be notified of: something they can act on now."""

    APPROVAL_WAITING = "approval_waiting", "A movement waits for my approval"
    MANUAL_INTERVENTION = "manual_intervention", "A movement is in MANUAL_INTERVENTION"
    ATTENTION = "attention", "A movement needs attention"
    OVERRIDE_PROPOSAL = "override_proposal", "An override proposal waits for my confirmation"
    # Not a preference: the one email that sums up a person's digest notifications.
    DIGEST = "digest", "Digest"


PREFERENCE_KINDS = [kind for kind in Kind if kind != Kind.DIGEST]


class Mode(models.TextChoices):
    IMMEDIATE = "immediate", "At once"
    DIGEST = "digest", "In the digest"
    OFF = "off", "Never"


def _mode_field(kind: Kind) -> models.CharField:
    return models.CharField(
        max_length=16, choices=Mode.choices, default=Mode.IMMEDIATE, verbose_name=kind.label
    )


class NotificationPreference(models.Model):
    """How one person wants each kind told: at once, in the periodic digest, or never. A
    person without a row is told everything at once."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    approval_waiting = _mode_field(Kind.APPROVAL_WAITING)
    manual_intervention = _mode_field(Kind.MANUAL_INTERVENTION)
    attention = _mode_field(Kind.ATTENTION)
    override_proposal = _mode_field(Kind.OVERRIDE_PROPOSAL)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "my notifications"
        verbose_name_plural = "my notifications"

    def __str__(self) -> str:
        return f"notifications of {self.user}"

    def mode(self, kind: str) -> str:
        return getattr(self, kind)


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    CHAT = "chat", "Chat webhook"


class Status(models.TextChoices):
    PENDING = "PENDING", "Pending"
    SENT = "SENT", "Sent"
    IN_DIGEST = "IN_DIGEST", "Sent in a digest"
    DROPPED = "DROPPED", "Dropped (nothing to act on any more)"
    DEAD = "DEAD", "Dead"


class Notification(models.Model):
    """One message to one address (an email to a person, or a post to the chat webhook),
    frozen when the event happened. Immediate ones are sent by the ``notifications.send`` task
    once the event's transaction commits, with retries; digest ones wait for the digest sweep,
    which writes one DIGEST notification per person summing them up."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    channel = models.CharField(max_length=8, choices=Channel.choices)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.IMMEDIATE)
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notifications",
        help_text="Empty for the chat webhook (the team's channel).",
    )
    address = models.CharField(max_length=500, help_text="The email address or webhook URL.")
    request = models.ForeignKey(
        "movements.MovementRequest",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="notifications",
    )
    proposal = models.ForeignKey(
        "movements.OverrideProposal",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="notifications",
    )
    subject = models.CharField(max_length=200)
    body = models.TextField()
    url = models.CharField(max_length=500, blank=True, help_text="The console page to act on.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    digest = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="summarised",
        help_text="The digest that told it.",
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"]),
            models.Index(fields=["mode", "status", "recipient"]),
        ]

    def __str__(self) -> str:
        return f"{self.kind} to {self.address} ({self.status})"

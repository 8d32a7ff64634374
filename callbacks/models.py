"""Webhook subscriptions and the transactional outbox of their deliveries."""

import uuid
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from callbacks import signing
from callbacks.events import ALL_EVENT_TYPES, EVENT_TYPES
from callbacks.targets import TargetRefused, validate_target_url


def new_secret() -> str:
    return signing.new_secret()


class Subscription(models.Model):
    """A receiver: where to POST, the secret that signs the body, and the events it wants.

    ``owner`` is the API client that registered it (it is sent only its own movements'
    events); operator-made subscriptions have none and receive every movement's events. The
    secret is shown once, when it is made; afterwards only its fingerprint.
    """

    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="webhook_subscriptions",
        help_text="The API client that registered it; empty for an operator's subscription.",
    )
    url = models.URLField(max_length=500)
    secret = models.CharField(
        max_length=200,
        default=new_secret,
        help_text="Standard Webhooks secret (whsec_...); never shown after creation.",
    )
    previous_secret = models.CharField(max_length=200, blank=True)
    previous_secret_expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Until then the secret replaced by the last rotation signs too.",
    )
    event_types = models.JSONField(
        default=list, help_text="The event types this receiver wants (at least one)."
    )
    is_active = models.BooleanField(default=True)
    deleted_at = models.DateTimeField(
        null=True, blank=True, help_text="Deleted by its client (kept for the delivery history)."
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return self.name

    def wants(self, event_type: str) -> bool:
        """``"*"`` among the event types asks for every type (those added later too)."""
        types = self.event_types or []
        return event_type in types or (ALL_EVENT_TYPES in types and event_type in EVENT_TYPES)

    def signing_secrets(self, now: datetime | None = None) -> list[str]:
        """The secrets that sign an attempt now: the current one, and the previous one while
        its overlap lasts."""
        now = now or timezone.now()
        valid = [self.secret]
        if (
            self.previous_secret
            and self.previous_secret_expires_at
            and self.previous_secret_expires_at > now
        ):
            valid.append(self.previous_secret)
        return valid

    @property
    def secret_fingerprint(self) -> str:
        return signing.fingerprint(self.secret)

    def clean(self) -> None:
        errors: dict[str, str] = {}
        try:
            validate_target_url(self.url)
        except TargetRefused as exc:
            errors["url"] = str(exc)
        if not isinstance(self.event_types, list) or not self.event_types:
            errors["event_types"] = "choose at least one event type"
        else:
            unknown = sorted(set(self.event_types) - {*EVENT_TYPES, ALL_EVENT_TYPES})
            if unknown:
                errors["event_types"] = f"unknown event types: {', '.join(unknown)}"
        try:
            signing.secret_key(self.secret)
        except ValueError as exc:
            errors["secret"] = str(exc)
        if errors:
            raise ValidationError(errors)


class DeliveryStatus(models.TextChoices):
    PENDING = "PENDING", "Pending"
    DELIVERED = "DELIVERED", "Delivered"
    DEAD = "DEAD", "Dead"


class Delivery(models.Model):
    """One event for one subscription (an outbox row, written in the transaction of the state
    change). ``body`` is frozen when the event happens: every attempt sends the same bytes,
    signed afresh with the attempt's timestamp."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    event_id = models.UUIDField(
        db_index=True, help_text="Shared by the deliveries of one event to several receivers."
    )
    subscription = models.ForeignKey(
        Subscription, on_delete=models.PROTECT, related_name="deliveries"
    )
    request = models.ForeignKey(
        "movements.MovementRequest",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="callback_deliveries",
        help_text="Empty for a test event.",
    )
    event_type = models.CharField(max_length=32, db_index=True)
    body = models.TextField(help_text="The JSON body, exactly as sent.")
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(
        default=0, help_text="Attempts since the delivery was (re)queued."
    )
    next_attempt_at = models.DateTimeField(default=timezone.now)
    enqueued_at = models.DateTimeField(
        null=True, blank=True, help_text="When a delivery task was last queued for it."
    )
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    sending_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="While an attempt is on the wire (until its deadline): no other delivery "
        "of the subscription is sent meanwhile, so a slow receiver delays only its own.",
    )
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    redelivered_at = models.DateTimeField(null=True, blank=True)
    redelivered_by = models.CharField(max_length=200, blank=True)
    occurred_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "deliveries"
        indexes = [models.Index(fields=["status", "next_attempt_at"])]
        permissions = [("redeliver_delivery", "Can redeliver a webhook delivery")]

    def __str__(self) -> str:
        return f"{self.event_type} -> {self.subscription_id} ({self.status})"


class Event(models.Model):
    """One event of a movement, whoever is subscribed: the feed (``/api/v1/events/``) serves
    these, and every delivery of the event sends the same ``body``.

    ``sequence`` counts the movement's events (1, 2, ...), so a receiver can put webhooks that
    arrive out of order back in order. ``position`` orders the feed: it is assigned after the
    event's transaction committed, by one publisher at a time, so a client following the feed
    with a cursor never skips an event that commits late.
    """

    id = models.BigAutoField(primary_key=True)
    event_id = models.UUIDField(unique=True, default=uuid.uuid4, editable=False)
    request = models.ForeignKey(
        "movements.MovementRequest", on_delete=models.PROTECT, related_name="callback_events"
    )
    event_type = models.CharField(max_length=32)
    sequence = models.PositiveIntegerField()
    body = models.TextField(help_text="The JSON payload, exactly as delivered.")
    occurred_at = models.DateTimeField(default=timezone.now)
    position = models.BigIntegerField(null=True, blank=True, unique=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "sequence"], name="event_sequence_per_movement"
            )
        ]

    def __str__(self) -> str:
        return f"{self.event_type} #{self.sequence} of {self.request_id}"


class FeedCounter(models.Model):
    """The last feed position handed out (one row; its lock serialises the publishers)."""

    last_position = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"feed position {self.last_position}"


class DeliveryAttempt(models.Model):
    """One HTTP attempt of a delivery: what came back, or why nothing did."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    url = models.CharField(max_length=500)
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    response_excerpt = models.TextField(blank=True)
    succeeded = models.BooleanField(default=False)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        outcome = self.status_code or self.error[:40] or "-"
        return f"attempt {self.number}: {outcome}"

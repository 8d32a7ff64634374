"""Webhook subscriptions and the transactional outbox of their deliveries."""

import secrets
import uuid

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from callbacks.events import EVENT_TYPES
from callbacks.targets import TargetRefused, validate_target_url


def new_secret() -> str:
    return secrets.token_urlsafe(32)


class Subscription(models.Model):
    """A receiver: where to POST, the secret that signs the body, and the events it wants."""

    name = models.CharField(max_length=100)
    url = models.URLField(max_length=500)
    secret = models.CharField(
        max_length=200,
        default=new_secret,
        help_text="Shared secret for the HMAC-SHA256 signature (X-QTG-Signature).",
    )
    event_types = models.JSONField(
        default=list, help_text="The event types this receiver wants (at least one)."
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return self.name

    def wants(self, event_type: str) -> bool:
        return event_type in (self.event_types or [])

    def clean(self) -> None:
        errors: dict[str, str] = {}
        try:
            validate_target_url(self.url)
        except TargetRefused as exc:
            errors["url"] = str(exc)
        if not isinstance(self.event_types, list) or not self.event_types:
            errors["event_types"] = "choose at least one event type"
        else:
            unknown = sorted(set(self.event_types) - set(EVENT_TYPES))
            if unknown:
                errors["event_types"] = f"unknown event types: {', '.join(unknown)}"
        if not (self.secret or "").strip():
            errors["secret"] = "required"
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
        "movements.MovementRequest", on_delete=models.PROTECT, related_name="callback_deliveries"
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

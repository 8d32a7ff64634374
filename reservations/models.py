"""Hardcap limits and the reservation each movement request holds against them."""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django_fsm import FSMField, FSMModelMixin, transition

from qtg.core.chain import linked_constraint
from qtg.core.models import AuditEventModel
from qtg.core.money import MONEY
from qtg.core.venues import canonical_venue

POSITIVE = [MinValueValidator(Decimal("0.000000000000000001"))]


class Hardcap(models.Model):
    """A limit on the money in flight for one scope: an asset, optionally narrowed to the
    source (venue / account) the money leaves from.

    Every active hardcap whose scope covers a request must have room for it; an asset with no
    hardcap at all is refused (fail closed).
    """

    asset = models.CharField(max_length=32, help_text="Asset symbol, e.g. USDC (upper case).")
    source = models.CharField(
        max_length=200,
        blank=True,
        help_text="Source venue or account as named on the movement; blank = every source.",
    )
    max_in_flight = models.DecimalField(
        **MONEY,
        validators=POSITIVE,
        help_text="Cap on the sum of HELD reservations in this scope.",
    )
    max_per_24h = models.DecimalField(
        **MONEY,
        null=True,
        blank=True,
        validators=POSITIVE,
        help_text="Optional rolling 24-hour velocity limit: HELD + CONSUMED reserved in the "
        "last 24 hours. Blank = no velocity limit.",
    )
    is_active = models.BooleanField(default=True)
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["asset", "source"]
        constraints = [
            models.UniqueConstraint(fields=["asset", "source"], name="hardcap_one_per_scope"),
            models.CheckConstraint(
                condition=Q(max_in_flight__gt=0), name="hardcap_max_in_flight_positive"
            ),
            models.CheckConstraint(
                condition=Q(max_per_24h__isnull=True) | Q(max_per_24h__gt=0),
                name="hardcap_max_per_24h_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"hardcap {self.scope_label}"

    @property
    def scope_label(self) -> str:
        return f"{self.asset} from {self.source}" if self.source else f"{self.asset} (any source)"

    def clean(self) -> None:
        self.asset = (self.asset or "").strip().upper()
        self.source = canonical_venue(self.source)
        if not self.asset:
            raise ValidationError({"asset": "required"})


class ReservationState(models.TextChoices):
    HELD = "HELD", "Held"
    CONSUMED = "CONSUMED", "Consumed"
    RELEASED = "RELEASED", "Released"


class Reservation(FSMModelMixin, models.Model):
    """The headroom one movement request holds: HELD until it is CONSUMED (the money left) or
    RELEASED (it did not). The scope (asset, source) is copied from the request so the sums
    the hardcaps need are one indexed query."""

    request = models.OneToOneField(
        "movements.MovementRequest", on_delete=models.PROTECT, related_name="reservation"
    )
    asset = models.CharField(max_length=32)
    source = models.CharField(max_length=200)
    amount = models.DecimalField(**MONEY)
    state = FSMField(
        max_length=16,
        choices=ReservationState.choices,
        default=ReservationState.HELD,
        protected=True,
    )
    held_at = models.DateTimeField(default=timezone.now)
    settled_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-held_at"]
        indexes = [models.Index(fields=["asset", "state", "held_at"])]
        permissions = [
            ("settle_reservation", "Can consume or release a held reservation by hand"),
        ]

    def __str__(self) -> str:
        return f"{self.amount} {self.asset} ({self.state})"

    # Transitions stay free of side effects; reservations.services does the work around them.
    @transition(field=state, source=ReservationState.HELD, target=ReservationState.CONSUMED)
    def consume(self) -> None:
        pass

    @transition(field=state, source=ReservationState.HELD, target=ReservationState.RELEASED)
    def release(self) -> None:
        pass


class ReservationEvent(AuditEventModel):
    """One audit record of a reservation: who, when, why, and the request state at the time."""

    reservation = models.ForeignKey(Reservation, on_delete=models.PROTECT, related_name="events")
    old_state = models.CharField(max_length=16, blank=True)
    new_state = models.CharField(max_length=16)
    request_state = models.CharField(
        max_length=32, help_text="The movement's state when this happened."
    )
    reason = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    chain_stream = "reservation_id"
    chain_subject_has_rows = True  # held with its first event

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [linked_constraint("reservationevent")]

    def __str__(self) -> str:
        return f"{self.old_state or '-'} -> {self.new_state}"


class ClientLimit(models.Model):
    """How much one client (a user, or everyone in a group) may hold while its movements wait
    for approval, overriding ``QTG_CLIENT_MAX_PENDING_COUNT`` / ``_SHARE``. A user's own row
    wins; otherwise the most generous of the user's groups' rows applies, field by field."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="client_limit",
    )
    group = models.OneToOneField(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="client_limit"
    )
    max_pending_count = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Movements awaiting approval at once. Blank = the default setting.",
    )
    max_pending_share = models.DecimalField(
        max_digits=5,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0")), MaxValueValidator(Decimal("1"))],
        help_text="Share (0 to 1) of each hardcap its movements awaiting approval may hold. "
        "Blank = the default setting.",
    )
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, group__isnull=True)
                | Q(user__isnull=True, group__isnull=False),
                name="client_limit_user_or_group",
            ),
        ]

    def __str__(self) -> str:
        return f"limit for {self.user or self.group}"

"""Admin for hardcaps and reservations. Reservations are read-only history; the only change an
operator makes is settling a HELD reservation of a finished movement, through
``reservation_settle`` with a reason, after a confirmation page."""

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from qtg.core.actors import Actor
from qtg.core.admin import ReadOnlyInline, ReadOnlyModelAdmin, bulk_confirmation_context
from qtg.core.errors import QTGError
from qtg.core.money import display_amount
from reservations.models import (
    ClientLimit,
    Hardcap,
    Reservation,
    ReservationEvent,
    ReservationState,
)
from reservations.policies import Rule, settle_permission_refusal, settle_refusal
from reservations.services import (
    client_pending_holds,
    hardcap_in_flight,
    hardcap_used_24h,
    pending_holds_by_client,
    reservation_settle,
)


@admin.register(Hardcap)
class HardcapAdmin(admin.ModelAdmin):
    list_display = (
        "asset",
        "scope_source",
        "cap_in_flight",
        "in_flight",
        "cap_per_24h",
        "used_24h",
        "is_active",
    )
    list_filter = ("is_active", "asset")
    search_fields = ("asset", "source", "note")
    readonly_fields = ("in_flight", "used_24h", "pending_by_client", "created_at", "updated_at")
    fields = (
        "asset",
        "source",
        "max_in_flight",
        "max_per_24h",
        "is_active",
        "note",
        "in_flight",
        "used_24h",
        "pending_by_client",
        "created_at",
        "updated_at",
    )

    @admin.display(description="source")
    def scope_source(self, obj: Hardcap) -> str:
        return obj.source or "(any source)"

    @admin.display(description="max in flight", ordering="max_in_flight")
    def cap_in_flight(self, obj: Hardcap):
        return display_amount(obj.max_in_flight, obj.asset)

    @admin.display(description="max per 24h", ordering="max_per_24h")
    def cap_per_24h(self, obj: Hardcap):
        return display_amount(obj.max_per_24h, obj.asset) or "-"

    @admin.display(description="in flight now")
    def in_flight(self, obj: Hardcap):
        return display_amount(hardcap_in_flight(hardcap=obj), obj.asset) if obj.pk else "-"

    @admin.display(description="reserved in the last 24h")
    def used_24h(self, obj: Hardcap):
        return display_amount(hardcap_used_24h(hardcap=obj), obj.asset) if obj.pk else "-"

    @admin.display(description="held awaiting approval, per client")
    def pending_by_client(self, obj: Hardcap):
        rows = pending_holds_by_client(hardcap=obj) if obj.pk else []
        if not rows:
            return "-"
        return format_html_join(
            mark_safe("<br>"),
            "{}: {} movement(s), {} {}",
            (
                (
                    row["request__created_by__username"] or "(system)",
                    row["count"],
                    display_amount(row["amount"], obj.asset),
                    obj.asset,
                )
                for row in rows
            ),
        )


@admin.register(ClientLimit)
class ClientLimitAdmin(admin.ModelAdmin):
    """Per user or group: how many movements may await approval, and what share of each
    hardcap they may hold (blank = the QTG_CLIENT_MAX_PENDING_* settings)."""

    list_display = ("__str__", "max_pending_count", "max_pending_share", "pending_now", "note")
    autocomplete_fields = ("user", "group")
    search_fields = ("user__username", "group__name", "note")

    @admin.display(description="awaiting approval now")
    def pending_now(self, obj: ClientLimit):
        if obj.user_id is None:
            return "-"
        return client_pending_holds(user_id=obj.user_id).count()


class ReservationEventInline(ReadOnlyInline):
    model = ReservationEvent
    view_permission = "reservations.view_reservation"
    ordering = ("-created_at", "-id")
    fields = (
        "created_at",
        "old_state",
        "new_state",
        "request_state",
        "actor_type",
        "actor_id",
        "reason",
    )
    readonly_fields = fields


class SettleForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Why the money did (consume) or did not (release) leave. Kept in the "
        "reservation's history.",
    )


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyModelAdmin):
    list_display = (
        "movement",
        "asset",
        "source",
        "amount_display",
        "state",
        "held_at",
        "settled_at",
    )
    list_filter = ("state", "asset")
    search_fields = ("request__id", "asset", "source")
    list_select_related = ("request",)
    date_hierarchy = "held_at"
    fields = (
        "movement",
        "movement_state",
        "asset",
        "source",
        "amount_display",
        "state",
        "held_at",
        "settled_at",
    )
    readonly_fields = fields
    inlines = [ReservationEventInline]
    actions = ["consume_selected", "release_selected"]

    @admin.display(description="amount", ordering="amount")
    def amount_display(self, obj: Reservation) -> str:
        return display_amount(obj.amount, obj.asset)

    def has_settle_permission(self, request) -> bool:
        return settle_permission_refusal(Actor.for_user(request.user)) is None

    @admin.display(description="movement", ordering="request")
    def movement(self, obj: Reservation):
        try:
            url = reverse("admin:movements_movementrequest_change", args=[obj.request_id])
        except NoReverseMatch:  # the movements admin is not registered
            return str(obj.request_id)
        return format_html('<a href="{}">{}</a>', url, str(obj.request_id)[:8])

    @admin.display(description="movement state")
    def movement_state(self, obj: Reservation) -> str:
        return obj.request.request_state

    @staticmethod
    def _held(rows: list[Reservation], actor: Actor) -> list[Reservation]:
        """The selected reservations still HELD. One whose movement is still running stays in:
        the service refuses it with its reason, shown to the operator."""
        held = []
        for reservation in rows:
            movement = reservation.request
            refusal = settle_refusal(actor=actor, reservation=reservation, movement=movement)
            if refusal is None or refusal.code != Rule.NOT_HELD:
                held.append(reservation)
        return held

    def _settle(self, request, queryset, outcome: str, verb: str):
        actor = Actor.for_user(request.user)
        rows = list(queryset.select_related("request"))
        held = self._held(rows, actor)
        form = SettleForm(request.POST if request.POST.get("post") else None)
        if request.POST.get("post") and form.is_valid():
            done = 0
            for reservation in held:
                try:
                    reservation_settle(
                        reservation=reservation,
                        outcome=outcome,
                        reason=form.cleaned_data["reason"],
                        actor=actor,
                    )
                    done += 1
                except QTGError as exc:
                    self.message_user(request, f"{reservation}: {exc.message}", messages.ERROR)
            if done:
                self.message_user(
                    request, f"{verb.capitalize()}d {done} reservation(s).", messages.SUCCESS
                )
            return None
        context = bulk_confirmation_context(
            self,
            request,
            title=f"{verb.capitalize()} held reservations",
            has_items=bool(held),
            verb=verb,
            outcome=outcome,
            reservations=held,
            skipped=len(rows) - len(held),
            form=form,
        )
        return TemplateResponse(request, "reservations/settle_confirmation.html", context)

    @admin.action(
        description="Consume selected held reservations (money left)…", permissions=["settle"]
    )
    def consume_selected(self, request, queryset):
        return self._settle(request, queryset, ReservationState.CONSUMED, "consume")

    @admin.action(
        description="Release selected held reservations (money did not leave)…",
        permissions=["settle"],
    )
    def release_selected(self, request, queryset):
        return self._settle(request, queryset, ReservationState.RELEASED, "release")

"""Admin for webhook subscriptions and their deliveries. Deliveries are read-only history; the
one action is to redeliver (through ``delivery_redeliver``) after a confirmation page."""

import json

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.utils.html import format_html

from callbacks.events import EVENT_TYPES
from callbacks.models import Delivery, DeliveryAttempt, DeliveryStatus, Subscription
from callbacks.services import delivery_redeliver
from movements.interface import add_movement_page_inline
from qtg.core.actors import Actor
from qtg.core.admin import ReadOnlyInline, ReadOnlyModelAdmin, bulk_confirmation_context
from qtg.core.errors import QTGError


class SubscriptionForm(forms.ModelForm):
    url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        help_text="http(s) endpoint that receives the signed POSTs.",
    )
    event_types = forms.MultipleChoiceField(
        choices=[(event, event) for event in EVENT_TYPES],
        widget=forms.CheckboxSelectMultiple,
        help_text="The events this receiver is sent.",
    )

    class Meta:
        model = Subscription
        fields = ("name", "url", "secret", "event_types", "is_active")
        widgets = {"secret": forms.TextInput(attrs={"size": 60, "autocomplete": "off"})}


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    form = SubscriptionForm
    list_display = ("name", "url", "events", "is_active", "pending", "dead")
    list_filter = ("is_active",)
    search_fields = ("name", "url")

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                pending_count=Count(
                    "deliveries", filter=Q(deliveries__status=DeliveryStatus.PENDING)
                ),
                dead_count=Count("deliveries", filter=Q(deliveries__status=DeliveryStatus.DEAD)),
            )
        )

    @admin.display(description="event types")
    def events(self, obj: Subscription) -> str:
        return ", ".join(obj.event_types or [])

    @admin.display(description="pending", ordering="pending_count")
    def pending(self, obj: Subscription) -> int:
        return obj.pending_count

    @admin.display(description="dead", ordering="dead_count")
    def dead(self, obj: Subscription) -> int:
        return obj.dead_count


class DeliveryAttemptInline(ReadOnlyInline):
    model = DeliveryAttempt
    view_permission = "callbacks.view_delivery"
    ordering = ("-started_at", "-id")
    fields = (
        "number",
        "started_at",
        "duration_ms",
        "status_code",
        "succeeded",
        "error",
        "response_excerpt",
    )
    readonly_fields = fields


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyModelAdmin):
    list_display = (
        "short_id",
        "event_type",
        "subscription",
        "movement",
        "status",
        "attempts",
        "next_attempt_at",
        "last_status_code",
        "created_at",
    )
    list_filter = ("status", "event_type", "subscription")
    search_fields = ("id", "event_id", "request__id")
    list_select_related = ("subscription", "request")
    date_hierarchy = "created_at"
    fields = (
        "id",
        "event_id",
        "event_type",
        "subscription",
        "request",
        "status",
        "attempts",
        "next_attempt_at",
        "enqueued_at",
        "last_attempt_at",
        "last_status_code",
        "last_error",
        "delivered_at",
        "redelivered_at",
        "redelivered_by",
        "occurred_at",
        "created_at",
        "pretty_body",
    )
    readonly_fields = fields
    inlines = [DeliveryAttemptInline]
    actions = ["redeliver_selected"]

    def has_redeliver_permission(self, request) -> bool:
        return request.user.has_perm("callbacks.redeliver_delivery")

    @admin.display(description="delivery")
    def short_id(self, obj: Delivery) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="movement", ordering="request")
    def movement(self, obj: Delivery) -> str:
        return str(obj.request_id)[:8]

    @admin.display(description="body")
    def pretty_body(self, obj: Delivery):
        try:
            text = json.dumps(json.loads(obj.body), indent=2, sort_keys=True)
        except ValueError:
            text = obj.body
        return format_html("<pre>{}</pre>", text)

    @admin.action(
        description="Redeliver selected dead or delivered deliveries…", permissions=["redeliver"]
    )
    def redeliver_selected(self, request, queryset):
        eligible = queryset.exclude(status=DeliveryStatus.PENDING)
        if request.POST.get("post"):
            actor = Actor.for_user(request.user)
            done = 0
            for delivery in eligible:
                try:
                    delivery_redeliver(delivery=delivery, actor=actor)
                    done += 1
                except QTGError as exc:
                    self.message_user(request, f"{delivery}: {exc.message}", messages.ERROR)
            if done:
                self.message_user(request, f"Queued {done} delivery(ies) again.", messages.SUCCESS)
            return None
        deliveries = list(eligible.select_related("subscription"))
        context = bulk_confirmation_context(
            self,
            request,
            title="Redeliver webhook deliveries",
            has_items=bool(deliveries),
            deliveries=deliveries,
            skipped=queryset.count() - len(deliveries),
        )
        return TemplateResponse(request, "callbacks/redeliver_confirmation.html", context)


class MovementDeliveryInline(ReadOnlyInline):
    """On the movement page: the webhook deliveries this movement caused, for whoever may
    view the movement."""

    view_permission = "movements.view_movementrequest"

    model = Delivery
    fk_name = "request"
    verbose_name = "callback delivery"
    verbose_name_plural = "Callback deliveries (newest first)"
    show_change_link = True  # redeliver lives on the delivery's own page
    fields = readonly_fields = (
        "created_at",
        "event_type",
        "subscription",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "delivered_at",
    )

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("subscription")
            .order_by("-created_at", "-pk")
        )


add_movement_page_inline(MovementDeliveryInline)

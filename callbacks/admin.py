"""Admin for webhook subscriptions and their deliveries. Deliveries are read-only history; the
one action is to redeliver (through ``delivery_redeliver``) after a confirmation page."""

import json
from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from access.one_time import secret_show_once
from callbacks import signing
from callbacks.events import ALL_EVENT_TYPES, EVENT_TYPES
from callbacks.models import Delivery, DeliveryAttempt, DeliveryStatus, Subscription
from callbacks.services import (
    delivery_redeliver,
    subscription_delete,
    subscription_rotate_secret,
    subscription_save,
)
from movements.public import add_movement_page_inline
from qtg.core.actors import Actor
from qtg.core.admin import (
    PeopleByName,
    ReadOnlyInline,
    ReadOnlyModelAdmin,
    bulk_confirmation_context,
)
from qtg.core.errors import QTGError


class SubscriptionForm(forms.ModelForm):
    url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        help_text="http(s) endpoint that receives the signed POSTs.",
    )
    event_types = forms.MultipleChoiceField(
        choices=[
            (ALL_EVENT_TYPES, "* (every event type, those added later too)"),
            *((event, event) for event in EVENT_TYPES),
        ],
        widget=forms.CheckboxSelectMultiple,
        help_text="The events this receiver is sent.",
    )

    new_secret = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(attrs={"size": 60, "autocomplete": "new-password"}),
        help_text="Write-only. Leave empty to keep the secret (a new subscription gets a "
        "generated one, shown once). A whsec_ secret of at least 32 bytes; on a change the "
        "old secret keeps signing next to it for the overlap window.",
    )
    rotate_secret = forms.BooleanField(
        required=False,
        help_text="Generate a new secret (shown once after saving); the old one keeps "
        "signing next to it for the overlap window.",
    )

    class Meta:
        model = Subscription
        fields = ("name", "url", "event_types", "is_active")

    def clean_new_secret(self) -> str:
        value = self.cleaned_data.get("new_secret") or ""
        if value:
            try:
                signing.secret_key(value)
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from None
        return value


@admin.register(Subscription)
class SubscriptionAdmin(PeopleByName, admin.ModelAdmin):
    form = SubscriptionForm
    list_display = ("name", "url", "owner", "events", "is_active", "pending", "dead")
    list_filter = ("is_active",)
    search_fields = ("name", "url")
    list_select_related = ("owner",)
    readonly_fields = ("owner", "secret_fingerprint", "previous_secret_expires_at", "deleted_at")

    @admin.display(description="secret")
    def secret_fingerprint(self, obj: Subscription) -> str:
        return obj.secret_fingerprint if obj.pk else "-"

    def save_model(self, request, obj, form, change):
        given = form.cleaned_data.get("new_secret")
        rotate = form.cleaned_data.get("rotate_secret")
        actor = Actor.for_user(request.user)
        if not change:
            if given:
                obj.secret = given
            subscription_save(subscription=obj, actor=actor)
            if not given:
                self._show_once(request, obj.secret)
            return
        subscription_save(subscription=obj, actor=actor)
        if given or rotate:
            overlap = timedelta(seconds=float(settings.QTG_WEBHOOK_SECRET_OVERLAP_SECONDS))
            secret = subscription_rotate_secret(
                subscription=obj, actor=actor, overlap=overlap, secret=given or ""
            )
            if not given:
                self._show_once(request, secret)
            obj.refresh_from_db()

    def delete_model(self, request, obj):
        # Deleting stops sending, recorded (callbacks.services.subscription_delete); the row
        # stays for the deliveries and the records that name it.
        subscription_delete(subscription=obj, actor=Actor.for_user(request.user))

    def delete_queryset(self, request, queryset):
        for subscription in queryset:
            self.delete_model(request, subscription)

    def _show_once(self, request, secret: str) -> None:
        # Shown on the page after saving, from the server-side session (access/one_time.py).
        request._qtg_one_time_secret = secret

    def _secret_page(self, request, obj, response):
        secret = getattr(request, "_qtg_one_time_secret", None)
        if secret is None:
            return response
        return secret_show_once(
            request,
            title=f"Signing secret of {obj}",
            secret=secret,
            note="The signing secret, shown this once: store it with the receiver.",
            back_url=reverse("admin:callbacks_subscription_change", args=[obj.pk]),
        )

    def response_add(self, request, obj, post_url_continue=None):
        response = super().response_add(request, obj, post_url_continue)
        return self._secret_page(request, obj, response)

    def response_change(self, request, obj):
        return self._secret_page(request, obj, super().response_change(request, obj))

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
        return str(obj.request_id)[:8] if obj.request_id else "(test event)"

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

"""The integrator's side of webhooks, under /api/v1/: a client's own subscriptions
(``/webhooks/``: the secret shown once, a test event, the delivery log, redelivery, secret
rotation) and the event feed (``/events/``) that carries the same events, in order, for
clients that poll or missed a delivery."""

import json
import re
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiCallback,
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework import generics, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from access.throttles import AnonymousRateThrottle, ClientRateThrottle, WebhookTestThrottle
from callbacks.events import ALL_EVENT_TYPES, CLIENT_EVENT_TYPES, TEST_EVENT_TYPE
from callbacks.models import Delivery, DeliveryAttempt, Event, Subscription
from callbacks.services import (
    PAYLOAD_VERSION,
    delivery_redeliver,
    events_publish,
    subscription_delete,
    subscription_rotate_secret,
    subscription_save,
    subscription_send_test,
)
from movements import public
from movements.public import movements_visible_to
from qtg.core.actors import Actor
from qtg.core.errors import NotFound

APIDefaults = public.APIDefaults
problem_responses = public.problem_responses

MAX_OVERLAP_SECONDS = 7 * 24 * 3600
FEED_PAGE_SIZE = 100
FEED_MAX_PAGE_SIZE = 500
CURSOR_PATTERN = re.compile(r"\A(0|[1-9][0-9]{0,17})\Z")


# --- Serializers ------------------------------------------------------------------------------


class WebhookSerializer(serializers.ModelSerializer):
    secret_fingerprint = serializers.CharField(
        read_only=True, help_text="A short hash of the secret (the secret itself is shown once)."
    )

    class Meta:
        model = Subscription
        fields = [
            "id",
            "name",
            "url",
            "event_types",
            "is_active",
            "secret_fingerprint",
            "previous_secret_expires_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(
        help_text="The signing secret (whsec_...). Shown only in this response: store it."
    )

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class JSONStringField(serializers.CharField):
    """A JSON string only (DRF's CharField would turn a number into its text)."""

    default_error_messages = {"invalid": "Must be a JSON string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class WebhookInputSerializer(serializers.Serializer):
    name = JSONStringField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="For your records (the url when empty).",
    )
    url = serializers.URLField(
        max_length=500,
        validators=[RegexValidator(r"\Ahttps?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[!-~]*)?\Z")],
        help_text="The http(s) endpoint that receives them.",
    )
    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=[*CLIENT_EVENT_TYPES, ALL_EVENT_TYPES]),
        allow_empty=False,
        min_length=1,
        max_length=len(CLIENT_EVENT_TYPES) + 1,
        help_text='The event types to receive (at least one); `"*"` receives every type, '
        "those added to the contract later too. The catalogue is in this document's "
        "`webhooks` section (`audit.checkpoint` goes to operators' subscriptions only).",
    )
    is_active = serializers.BooleanField(required=False, help_text="Paused when false.")


class RotateInputSerializer(serializers.Serializer):
    overlap_seconds = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_OVERLAP_SECONDS,
        help_text="How long the old secret keeps signing next to the new one (server default "
        "when absent; 0 stops it at once).",
    )


class DeliveryAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ["number", "started_at", "duration_ms", "status_code", "succeeded", "error"]
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    movement_id = serializers.UUIDField(source="request_id", allow_null=True)
    attempt_log = DeliveryAttemptSerializer(many=True)

    class Meta:
        model = Delivery
        fields = [
            "id",
            "event_id",
            "event_type",
            "movement_id",
            "status",
            "attempts",
            "next_attempt_at",
            "last_status_code",
            "last_error",
            "delivered_at",
            "redelivered_at",
            "created_at",
            "attempt_log",
        ]
        read_only_fields = fields


class WebhookMovementSerializer(public.MovementSerializer):
    sequence = serializers.IntegerField(
        help_text="The movement's event counter (1, 2, ...): sort a movement's events by it."
    )

    class Meta(public.MovementSerializer.Meta):
        fields = [*public.MovementSerializer.Meta.fields, "sequence"]


class EventSerializer(serializers.Serializer):
    """One event: the body of its webhook, exactly."""

    id = serializers.UUIDField(help_text="The event's id; the `webhook-id` header of its webhook.")
    type = serializers.ChoiceField(choices=[*CLIENT_EVENT_TYPES, TEST_EVENT_TYPE])
    timestamp = serializers.DateTimeField(help_text="When it happened.")
    version = serializers.CharField(help_text=f"The payload version, `{PAYLOAD_VERSION}`.")
    data = WebhookMovementSerializer(help_text="The movement as GET /movements/{id}/ shows it.")
    context = serializers.DictField(
        child=serializers.JSONField(),
        help_text="What the event adds: `previous_state`, the nodes that woke, ...",
    )


class EventPageSerializer(serializers.Serializer):
    results = EventSerializer(many=True)
    next_cursor = serializers.CharField(
        allow_null=True,
        help_text="Pass it as `after` to continue; null when the page is empty (keep yours).",
    )
    has_more = serializers.BooleanField(help_text="More events are ready now.")


# --- Webhooks -------------------------------------------------------------------------------


class DeliveryPagination(public.PagePagination):
    page_size = 50
    example_path = "/api/v1/webhooks/7/deliveries/"


WEBHOOK_ID = OpenApiParameter(
    "id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The subscription's id."
)
DELIVERY_ID = OpenApiParameter(
    "delivery_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The delivery's id."
)
WEBHOOK_EXAMPLE = {
    "id": 7,
    "name": "treasury",
    "url": "https://hooks.example.com/qtg",
    "event_types": ["request_completed", "request_failed"],
    "is_active": True,
    "secret_fingerprint": "sha256:3f1c9a0b6d2e4f58",
    "previous_secret_expires_at": None,
    "created_at": "2026-12-01T10:00:00Z",
    "updated_at": "2026-12-01T10:00:00Z",
}
SECRET_EXAMPLE = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
EVENT_EXAMPLE = {
    "id": "5f0c1b1e-3f8e-4a55-9a8d-2b0a6c3e9d11",
    "type": "request_completed",
    "timestamp": "2026-12-01T10:05:00Z",
    "version": PAYLOAD_VERSION,
    "data": {
        **public.MOVEMENT_EXAMPLE,
        "request_state": "COMPLETED",
        "current_frontier": [],
        "reservation": {"state": "CONSUMED", "amount": "1500.25"},
        "sequence": 8,
    },
    "context": {"previous_state": "EXECUTING"},
}
WEBHOOK_DELIVERY_DESCRIPTION = (
    "Headers `webhook-id` (the event id: the same on every retry; dedupe on "
    "it), `webhook-timestamp` (Unix seconds) and `webhook-signature` (`v1,<base64 "
    "HMAC-SHA256 of id.timestamp.body>`, space-separated, two during a secret rotation). "
    "Verify with any Standard Webhooks library and the `whsec_` secret. Answer 2xx within "
    "the timeout; anything else is retried with exponential backoff. Events of one "
    "movement may arrive out of order: sort by `data.sequence`."
)
WEBHOOK_CALLBACK = OpenApiCallback(
    "movement_event",
    "{$request.body#/url}",
    extend_schema(
        summary="An event, POSTed to the subscription's url (Standard Webhooks)",
        description=WEBHOOK_DELIVERY_DESCRIPTION + " Each event type and its payload: this "
        "document's `webhooks` section.",
        request=EventSerializer,
        responses={200: None},
    ),
)


def _validation_error(exc: DjangoValidationError) -> ValidationError:
    return ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)


@extend_schema_view(
    list=extend_schema(
        summary="List your webhook subscriptions",
        operation_id="webhooks_list",
        responses={200: WebhookSerializer(many=True), **problem_responses(400, 401)},
        examples=[OpenApiExample("Subscriptions", value=WEBHOOK_EXAMPLE, response_only=True)],
    ),
    retrieve=extend_schema(
        summary="Read one of your webhook subscriptions",
        operation_id="webhooks_retrieve",
        parameters=[WEBHOOK_ID],
        responses={200: WebhookSerializer, **problem_responses(400, 401, 404)},
        examples=[OpenApiExample("Subscription", value=WEBHOOK_EXAMPLE, response_only=True)],
    ),
)
@extend_schema(tags=["webhooks"])
class WebhookViewSet(APIDefaults, viewsets.GenericViewSet):
    serializer_class = WebhookSerializer
    pagination_class = None
    filter_backends = []
    lookup_value_regex = "[^/]+"

    def query_parameters(self) -> set[str]:
        return {"page", "page_size"} if self.action == "deliveries" else set()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Subscription.objects.none()
        return Subscription.objects.filter(
            owner=self.request.user, deleted_at__isnull=True
        ).order_by("pk")

    def get_object(self) -> Subscription:
        raw = self.kwargs["pk"]
        if not str(raw).isascii() or not str(raw).isdigit() or len(str(raw)) > 18:
            raise NotFound(f"webhook {raw} does not exist")
        try:
            return self.get_queryset().get(pk=int(raw))
        except Subscription.DoesNotExist:
            raise NotFound(f"webhook {raw} does not exist") from None

    def list(self, request: Request) -> Response:
        return Response(WebhookSerializer(self.get_queryset(), many=True).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(WebhookSerializer(self.get_object()).data)

    @extend_schema(
        summary="Subscribe to events (the secret is in this response only)",
        operation_id="webhooks_create",
        request=WebhookInputSerializer,
        responses={201: WebhookCreatedSerializer, **problem_responses(400, 401, 415)},
        callbacks=[WEBHOOK_CALLBACK],
        examples=[
            OpenApiExample(
                "Subscribe",
                value={
                    "url": "https://hooks.example.com/qtg",
                    "event_types": ["request_completed", "request_failed"],
                },
                request_only=True,
            ),
            OpenApiExample(
                "Created",
                value={**WEBHOOK_EXAMPLE, "secret": SECRET_EXAMPLE},
                response_only=True,
            ),
        ],
    )
    def create(self, request: Request) -> Response:
        data = self._input(WebhookInputSerializer, request)
        subscription = Subscription(
            owner=request.user,
            name=data.get("name") or data["url"][:100],
            url=data["url"],
            event_types=list(dict.fromkeys(data["event_types"])),
            is_active=data.get("is_active", True),
        )
        self._save(subscription, Actor.for_user(request.user))
        body = WebhookSerializer(subscription).data
        return Response({**body, "secret": subscription.secret}, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change a webhook subscription (url, event types, name, paused)",
        operation_id="webhooks_update",
        parameters=[WEBHOOK_ID],
        request=WebhookInputSerializer(partial=True),
        responses={200: WebhookSerializer, **problem_responses(400, 401, 404, 415)},
        examples=[
            OpenApiExample("Pause", value={"is_active": False}, request_only=True),
            OpenApiExample("Subscription", value=WEBHOOK_EXAMPLE, response_only=True),
        ],
    )
    def partial_update(self, request: Request, pk: str) -> Response:
        subscription = self.get_object()
        data = self._input(WebhookInputSerializer, request, partial=True)
        for field in ("url", "is_active"):
            if field in data:
                setattr(subscription, field, data[field])
        if "name" in data:
            subscription.name = data["name"] or subscription.url[:100]
        if "event_types" in data:
            subscription.event_types = list(dict.fromkeys(data["event_types"]))
        self._save(subscription, Actor.for_user(request.user))
        return Response(WebhookSerializer(subscription).data)

    @extend_schema(
        summary="Delete a webhook subscription (nothing more is sent to it)",
        operation_id="webhooks_destroy",
        parameters=[WEBHOOK_ID],
        request=None,
        responses={204: None, **problem_responses(400, 401, 404)},
    )
    def destroy(self, request: Request, pk: str) -> Response:
        subscription_delete(subscription=self.get_object(), actor=Actor.for_user(request.user))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Send a test event to the subscription",
        operation_id="webhooks_test",
        description=f"A `{TEST_EVENT_TYPE}` event, signed and delivered like any other "
        "(whatever event types the subscription asked for); follow it in the deliveries.",
        parameters=[WEBHOOK_ID],
        request=None,
        responses={202: DeliverySerializer, **problem_responses(400, 401, 404)},
    )
    @action(
        detail=True,
        methods=["post"],
        throttle_classes=[ClientRateThrottle, AnonymousRateThrottle, WebhookTestThrottle],
    )
    def test(self, request: Request, pk: str) -> Response:
        delivery = subscription_send_test(subscription=self.get_object())
        return Response(self._delivery(delivery.pk), status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="Rotate the signing secret (the new one is in this response only)",
        operation_id="webhooks_rotate_secret",
        description="The old secret keeps signing next to the new one for the overlap (the "
        "`webhook-signature` header then carries both), so the receiver can switch without "
        "missing a delivery.",
        parameters=[WEBHOOK_ID],
        request=RotateInputSerializer,
        responses={200: WebhookCreatedSerializer, **problem_responses(400, 401, 404, 415)},
        examples=[OpenApiExample("Rotate", value={"overlap_seconds": 3600}, request_only=True)],
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, pk: str) -> Response:
        subscription = self.get_object()
        data = self._input(RotateInputSerializer, request) if request.data else {}
        overlap = data.get("overlap_seconds")
        secret = subscription_rotate_secret(
            subscription=subscription,
            actor=Actor.for_user(request.user),
            overlap=timedelta(seconds=overlap) if overlap is not None else None,
        )
        subscription.refresh_from_db()
        return Response({**WebhookSerializer(subscription).data, "secret": secret})

    @extend_schema(
        summary="The subscription's deliveries and their attempts, newest first",
        operation_id="webhooks_deliveries",
        parameters=[WEBHOOK_ID],
        responses={200: DeliverySerializer(many=True), **problem_responses(400, 401, 404)},
    )
    @action(detail=True, methods=["get"], pagination_class=DeliveryPagination)
    def deliveries(self, request: Request, pk: str) -> Response:
        subscription = self.get_object()
        queryset = (
            Delivery.objects.filter(subscription=subscription)
            .prefetch_related("attempt_log")
            .order_by("-created_at", "-pk")
        )
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)

    @extend_schema(
        summary="Deliver again (a delivery that is DEAD or already DELIVERED)",
        operation_id="webhooks_redeliver",
        parameters=[WEBHOOK_ID, DELIVERY_ID],
        request=None,
        responses={
            202: DeliverySerializer,
            **problem_responses(
                400,
                401,
                404,
                409,
                descriptions={
                    409: "The delivery is still PENDING (it is retried on its own): "
                    "`details.current_state` names its status."
                },
                error_codes={409: ("conflict",)},
            ),
        },
    )
    @action(
        detail=True,
        methods=["post"],
        url_path=r"deliveries/(?P<delivery_id>[^/]+)/redeliver",
    )
    def redeliver(self, request: Request, pk: str, delivery_id: str) -> Response:
        subscription = self.get_object()
        if not Delivery.objects.filter(subscription=subscription, pk=_uuid(delivery_id)).exists():
            raise NotFound(f"delivery {delivery_id} does not exist")
        delivery = delivery_redeliver(delivery=delivery_id, actor=Actor.for_user(request.user))
        return Response(self._delivery(delivery.pk), status=status.HTTP_202_ACCEPTED)

    @staticmethod
    def _input(serializer_class, request: Request, partial: bool = False) -> dict[str, Any]:
        serializer = serializer_class(data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    @staticmethod
    def _save(subscription: Subscription, actor: Actor) -> None:
        try:
            subscription.full_clean(exclude=["owner"])
        except DjangoValidationError as exc:
            raise _validation_error(exc) from None
        subscription_save(subscription=subscription, actor=actor)

    @staticmethod
    def _delivery(pk: Any) -> dict[str, Any]:
        return DeliverySerializer(Delivery.objects.prefetch_related("attempt_log").get(pk=pk)).data


def _uuid(raw: str) -> Any:
    import uuid

    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise NotFound(f"delivery {raw} does not exist") from None


# --- The event feed ---------------------------------------------------------------------------


class EventFeedView(APIDefaults, generics.GenericAPIView):
    serializer_class = EventPageSerializer
    pagination_class = None
    filter_backends = []

    def query_parameters(self) -> set[str]:
        return {"after", "page_size"}

    @extend_schema(
        tags=["events"],
        summary="The event feed: every event of your movements, in a stable order",
        operation_id="events_list",
        description="The events webhooks carry (the same bodies, ids and per-movement "
        "`sequence`), for every movement you may see, oldest first. Start without `after`; then "
        "pass the `next_cursor` you got as `after`. The order never changes and an event never "
        "appears before one that is already behind your cursor, so following the cursor misses "
        "nothing. When `has_more` is false, poll again later with the same cursor.",
        parameters=[
            OpenApiParameter(
                "after",
                str,
                OpenApiParameter.QUERY,
                pattern=r"^(0|[1-9][0-9]{0,17})$",
                description="The `next_cursor` of the previous page (opaque).",
            ),
            OpenApiParameter(
                "page_size",
                {"type": "integer", "minimum": 1, "maximum": FEED_MAX_PAGE_SIZE},
                OpenApiParameter.QUERY,
                description=f"1 to {FEED_MAX_PAGE_SIZE} (default {FEED_PAGE_SIZE}).",
            ),
        ],
        responses={200: EventPageSerializer, **problem_responses(400, 401)},
        examples=[
            OpenApiExample(
                "A page",
                value={"results": [EVENT_EXAMPLE], "next_cursor": "1842", "has_more": False},
                response_only=True,
            )
        ],
    )
    def get(self, request: Request) -> Response:
        after = request.query_params.get("after", "0")
        if not CURSOR_PATTERN.match(after):
            raise ValidationError({"after": ["Invalid cursor."]})
        size = request.query_params.get("page_size", str(FEED_PAGE_SIZE))
        if not size.isascii() or not size.isdigit() or not 1 <= int(size) <= FEED_MAX_PAGE_SIZE:
            raise ValidationError(
                {"page_size": [f"Must be an integer from 1 to {FEED_MAX_PAGE_SIZE}."]}
            )
        size = int(size)
        # A reader publishes what has committed (the publisher after each commit may have
        # been lost with its process); skipped when another publisher is at it.
        events_publish()
        events = list(
            Event.objects.filter(
                position__gt=int(after),
                request__in=movements_visible_to(request.user).values("pk"),
            )
            .order_by("position")
            .values_list("position", "body")[: size + 1]
        )
        page = events[:size]
        return Response(
            {
                "results": [json.loads(body) for _, body in page],
                "next_cursor": str(page[-1][0]) if page else None,
                "has_more": len(events) > size,
            }
        )


__all__ = ["EventFeedView", "WebhookViewSet"]

"""The integration API. Views parse and shape; the lifecycle services decide and authorise
(the same Django permissions the admin uses) and raise domain errors that the one exception
handler turns into the error shape."""

import re
import uuid
from datetime import timedelta

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import generics, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import ApiToken
from access.services import DECIDE
from movements.api import examples
from movements.api.defaults import ERROR_CODES, APIDefaults, problem_responses
from movements.api.fields import IDEMPOTENCY_KEY_PATTERN, ecma, idempotency_key_value
from movements.api.filters import MovementFilter
from movements.api.pagination import MovementCursorPagination, MovementPagination
from movements.api.selectors import route_templates_current
from movements.api.serializers import (
    CancelInputSerializer,
    MovementCreateInputSerializer,
    MovementEventSerializer,
    MovementSerializer,
    ReasonInputSerializer,
    ResumeInputSerializer,
    RouteTemplateSerializer,
    TemplateSerializer,
    VenueSerializer,
    created_representation,
)
from movements.models import MovementRequest
from movements.selectors import (
    movements_visible_to,
    movements_with_details,
    request_events,
)
from movements.services import (
    manual_gate_resume,
    movement_approve,
    movement_cancel,
    movement_create,
    movement_reject,
    movement_withdraw,
    route_templates_read_once,
)
from qtg.core.actors import Actor
from qtg.core.errors import InvalidInput, NotFound, NotPermitted
from qtg.core.venues import venue_details

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotency-Replayed"

MOVEMENT_ID = OpenApiParameter(
    "id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The movement's id."
)


def movement_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(raw))
    except ValueError:
        raise NotFound(f"movement {raw} does not exist") from None


class RouteTemplateListView(APIDefaults, generics.GenericAPIView):
    serializer_class = RouteTemplateSerializer
    pagination_class = None
    filter_backends = []

    @extend_schema(
        tags=["route templates"],
        summary="List the active route templates",
        operation_id="route_templates_list",
        responses={200: RouteTemplateSerializer(many=True), **problem_responses(400, 401)},
        examples=[examples.ROUTE_TEMPLATES],
    )
    def get(self, request: Request) -> Response:
        return Response(RouteTemplateSerializer(route_templates_current(), many=True).data)


class TemplateListView(APIDefaults, generics.GenericAPIView):
    serializer_class = TemplateSerializer
    pagination_class = None
    filter_backends = []

    @extend_schema(
        tags=["discovery"],
        summary="Discover the templates a movement may follow (key, assets, params)",
        operation_id="templates_list",
        description="What `template` and `params` of a create may be, read at run time: the "
        "newest active version of each template, the assets it moves (null: any) and the "
        "params it takes with their types. A new template needs no new client.",
        responses={200: TemplateSerializer(many=True), **problem_responses(400, 401)},
        examples=[examples.TEMPLATES],
    )
    def get(self, request: Request) -> Response:
        return Response(TemplateSerializer(route_templates_current(), many=True).data)


class VenueListView(APIDefaults, generics.GenericAPIView):
    serializer_class = VenueSerializer
    pagination_class = None
    filter_backends = []

    @extend_schema(
        tags=["discovery"],
        summary="Discover the venues a movement may name (source, destination)",
        operation_id="venues_list",
        description="The venues this deployment knows, read at run time: configured chain and "
        "exchange accounts and the venues of QTG_KNOWN_VENUES, with the chain or exchange "
        "and the assets of each. A chain address (0x..., base58) is a valid destination "
        "too; whether money may go there is the address book's question.",
        responses={200: VenueSerializer(many=True), **problem_responses(400, 401)},
        examples=examples.VENUES,
    )
    def get(self, request: Request) -> Response:
        return Response(VenueSerializer(venue_details(), many=True).data)


@extend_schema_view(
    list=extend_schema(
        summary="List movements (pages, newest first; or a cursor over changes)",
        operation_id="movements_list",
        description="Everything for holders of `movements.view_movementrequest`; otherwise "
        "the movements the client created.\n\n"
        "Two ways to page. By page number (`page`, `page_size`), newest first: the response "
        "has `count`, `next`, `previous` and `results`. By cursor, for polling changes: give "
        "`updated_after` (and then `cursor`, the `next_cursor` of the previous page); the "
        "movements come oldest change first, ordered by (`updated_at`, `id`), and the response "
        "has `next`, `next_cursor` and `results`. A cursor page does not shift while "
        "movements change; a movement that changes again shows up again later. To see every "
        "change in order, follow `/api/v1/events/`.",
        parameters=[
            OpenApiParameter(
                "cursor",
                str,
                OpenApiParameter.QUERY,
                pattern=ecma(MovementCursorPagination.CURSOR_PATTERN),
                description="The `next_cursor` of the previous page (cursor paging).",
            )
        ],
        responses={200: MovementSerializer(many=True), **problem_responses(400, 401, 404)},
        examples=[examples.MOVEMENT],
    ),
    retrieve=extend_schema(
        summary="Read one movement",
        operation_id="movements_retrieve",
        parameters=[MOVEMENT_ID],
        responses={200: MovementSerializer, **problem_responses(400, 401, 404)},
        examples=[examples.MOVEMENT],
    ),
)
@extend_schema(tags=["movements"])
class MovementViewSet(APIDefaults, viewsets.GenericViewSet):
    # Decisions need a token its owner minted (access/permissions.py).
    token_scopes = {"approve": DECIDE, "reject": DECIDE, "cancel": DECIDE, "resume": DECIDE}
    serializer_class = MovementSerializer
    filterset_class = MovementFilter
    pagination_class = MovementPagination
    lookup_value_regex = "[^/]+"

    def query_parameters(self) -> set[str]:
        if self.action != "list":
            return set()
        paginator = MovementPagination
        return {
            *MovementFilter.base_filters,
            paginator.page_query_param,
            paginator.page_size_query_param,
            MovementCursorPagination.cursor_query_param,
        }

    @property
    def paginator(self):
        # Cursor paging once the client asks for changes (updated_after or a cursor).
        if not hasattr(self, "_paginator"):
            params = getattr(self.request, "query_params", {})
            cursor_mode = self.action == "list" and (
                "updated_after" in params or MovementCursorPagination.cursor_query_param in params
            )
            self._paginator = MovementCursorPagination() if cursor_mode else self.pagination_class()
        return self._paginator

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return MovementRequest.objects.none()
        return movements_visible_to(self.request.user).order_by("-created_at", "-pk")

    def get_object(self) -> MovementRequest:
        pk = movement_id(self.kwargs["pk"])
        try:
            return self.get_queryset().get(pk=pk)
        except MovementRequest.DoesNotExist:
            raise NotFound(f"movement {pk} does not exist") from None

    def list(self, request: Request) -> Response:
        queryset = self.filter_queryset(self.get_queryset())
        if isinstance(self.paginator, MovementCursorPagination):
            queryset = queryset.order_by("updated_at", "pk")
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(MovementSerializer(page, many=True).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(MovementSerializer(self.get_object()).data)

    @extend_schema(
        summary="Create a movement (idempotent)",
        operation_id="movements_create",
        description="Idempotent as the IETF `Idempotency-Key` draft says. The same key with "
        "the same body returns the original movement (200, header `Idempotency-Replayed: "
        "true`) and creates nothing; the same key with a different body is a 422; while the "
        "first request with the key is still being processed, a duplicate is a 409 (retry "
        'it). The key may be sent bare or as a structured-field string (`"..."`); both '
        "mean the same key. Keys are scoped to the authenticated client and kept for "
        "`QTG_IDEMPOTENCY_KEY_RETENTION_DAYS` (default 7) days; after that the key may be "
        "used again and creates a new movement.",
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                str,
                OpenApiParameter.HEADER,
                required=True,
                pattern=ecma(IDEMPOTENCY_KEY_PATTERN),
                description="A key the client chooses per movement (visible ASCII, 1-255), "
                'bare or quoted (`"key"`).',
            ),
            OpenApiParameter(
                REPLAYED_HEADER,
                str,
                OpenApiParameter.HEADER,
                enum=["true"],
                response=[200],
                description="Present on a replay: the movement was created by an earlier "
                "request with this key.",
            ),
        ],
        request=MovementCreateInputSerializer,
        responses={
            201: OpenApiResponse(
                MovementSerializer,
                description="Created (possibly FAILED "
                "with its `failure_reason`, e.g. over the hardcap).",
            ),
            200: OpenApiResponse(MovementSerializer, description="A replay: the original."),
            **problem_responses(
                400,
                401,
                409,
                415,
                422,
                descriptions={
                    409: "A request with this Idempotency-Key is still being processed: "
                    "retry it after `Retry-After` seconds."
                },
                error_codes={409: ("idempotency_in_progress",)},
            ),
        },
        examples=[examples.CREATE_REQUEST, examples.MOVEMENT],
    )
    def create(self, request: Request) -> Response:
        key = request.headers.get(IDEMPOTENCY_HEADER)
        if key is None or not re.search(IDEMPOTENCY_KEY_PATTERN, key):
            raise InvalidInput(
                "an Idempotency-Key header of 1 to 255 visible ASCII characters is required",
                details={IDEMPOTENCY_HEADER: ["required" if key is None else "invalid"]},
            )
        key = idempotency_key_value(key)
        # The template the key was checked against is the one the create compiles.
        with route_templates_read_once():
            serializer = MovementCreateInputSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            data = serializer.validated_data
            expires_in = data.get("expires_in_seconds")
            movement = movement_create(
                template=data["template"],
                asset=data["asset"],
                amount=data["amount"],
                source=data["source"],
                destination=data["destination"],
                params=data.get("params"),
                expires_in=timedelta(seconds=expires_in) if expires_in else None,
                idempotency_key=key,
                actor=Actor.for_user(request.user),
            )
        if movement.replayed:
            return Response(
                self._read(movement.pk),
                status=status.HTTP_200_OK,
                headers={REPLAYED_HEADER: "true"},
            )
        # Built from the rows the create wrote, not read again.
        created = created_representation(movement)
        return Response(
            self._read(movement.pk) if created is None else created,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        summary="Approve (four-eyes: not by its creator)",
        operation_id="movements_approve",
        examples=[examples.MOVEMENT],
        request=None,
        parameters=[MOVEMENT_ID],
        responses={200: MovementSerializer, **problem_responses(400, 401, 403, 404, 409)},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        movement = movement_approve(request=movement_id(pk), actor=Actor.for_user(request.user))
        return Response(self._read(movement.pk))

    @extend_schema(
        summary="Reject a movement waiting for approval",
        operation_id="movements_reject",
        examples=[examples.REASON_REQUEST, examples.MOVEMENT],
        request=ReasonInputSerializer,
        parameters=[MOVEMENT_ID],
        responses={200: MovementSerializer, **problem_responses(400, 401, 403, 404, 409, 415)},
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        reason = self._input(ReasonInputSerializer, request)["reason"]
        movement = movement_reject(
            request=movement_id(pk), actor=Actor.for_user(request.user), reason=reason
        )
        return Response(self._read(movement.pk))

    @extend_schema(
        summary="Withdraw a movement waiting for approval (its creator, or a supervisor)",
        operation_id="movements_withdraw",
        description="The movement's creator (or a holder of `movements.withdraw_movement`) "
        "takes back a movement that is still PENDING_APPROVAL: it becomes REJECTED with the "
        "`reason` as its `failure_reason` and `withdrawn_by` set, its reservation is "
        "RELEASED, and the `request_rejected` event (context: `previous_state`, "
        "`withdrawn_by`, `reason`) goes out like any rejection. In any other state it is a "
        "409 naming `details.current_state`. Someone else's movement needs a token with the "
        "`decide` scope.",
        examples=[examples.WITHDRAW_REQUEST, examples.MOVEMENT],
        request=ReasonInputSerializer,
        parameters=[MOVEMENT_ID],
        responses={
            200: MovementSerializer,
            **problem_responses(
                400,
                401,
                403,
                404,
                409,
                415,
                descriptions={
                    403: "Neither the movement's creator nor a holder of "
                    "`movements.withdraw_movement` (or, for someone else's movement, a token "
                    "without the `decide` scope).",
                    409: "The movement no longer waits for approval: `details.current_state` "
                    "names its state.",
                },
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str) -> Response:
        movement = self.get_object()  # 404 for a movement this client may not see
        reason = self._input(ReasonInputSerializer, request)["reason"]
        if movement.created_by_id != request.user.pk:
            # Withdrawing someone else's movement is a decision: it needs a decide token.
            token = request.auth
            if isinstance(token, ApiToken) and not token.allows(DECIDE):
                raise NotPermitted(
                    "withdrawing someone else's movement needs a token with the decide scope",
                    details={"scope": DECIDE},
                )
        movement = movement_withdraw(
            request=movement.pk, actor=Actor.for_user(request.user), reason=reason
        )
        return Response(self._read(movement.pk))

    @extend_schema(
        summary="Cancel (refused while money may be in flight; after a completed side effect "
        "only with acknowledge_funds_in_transit)",
        operation_id="movements_cancel",
        examples=[examples.CANCEL_REQUEST, examples.MOVEMENT],
        request=CancelInputSerializer,
        parameters=[MOVEMENT_ID],
        responses={
            200: MovementSerializer,
            **problem_responses(
                400,
                401,
                403,
                404,
                409,
                415,
                error_codes={409: (*ERROR_CODES[409], "acknowledgement_required")},
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        data = self._input(CancelInputSerializer, request)
        movement = movement_cancel(
            request=movement_id(pk),
            actor=Actor.for_user(request.user),
            reason=data["reason"],
            acknowledge_funds_in_transit=data["acknowledge_funds_in_transit"],
        )
        return Response(self._read(movement.pk))

    @extend_schema(
        summary="Release a waiting manual gate",
        operation_id="movements_resume",
        examples=[examples.RESUME_REQUEST, examples.MOVEMENT],
        request=ResumeInputSerializer,
        parameters=[MOVEMENT_ID],
        responses={200: MovementSerializer, **problem_responses(400, 401, 403, 404, 409, 415)},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        data = self._input(ResumeInputSerializer, request)
        movement = manual_gate_resume(
            request=movement_id(pk),
            actor=Actor.for_user(request.user),
            node_key=data.get("node_key"),
            note=data.get("note", ""),
        )
        return Response(self._read(movement.pk))

    @extend_schema(
        summary="The movement's audit trail, oldest first",
        operation_id="movements_events",
        examples=[examples.AUDIT_TRAIL],
        parameters=[MOVEMENT_ID],
        responses={200: MovementEventSerializer(many=True), **problem_responses(400, 401, 404)},
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def events(self, request: Request, pk: str) -> Response:
        movement = self.get_object()
        return Response(MovementEventSerializer(request_events(movement), many=True).data)

    @staticmethod
    def _input(serializer_class, request: Request) -> dict:
        serializer = serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    @staticmethod
    def _read(pk: uuid.UUID) -> dict:
        """The movement as it is now (whoever may act on it may read the result)."""
        return MovementSerializer(movements_with_details().get(pk=pk)).data

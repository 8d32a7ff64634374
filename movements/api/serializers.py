"""Input serializers validate what a client sends; output serializers shape what it reads.

The two are kept apart: input fields are strict about JSON types (see ``fields``), output
fields describe the stored rows. Amounts are decimal strings both ways, never JSON numbers.
"""

import functools
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from movements.api.fields import (
    AMOUNT_PATTERN,
    ASSET_PATTERN,
    NODE_KEY_PATTERN,
    NOT_BLANK_PATTERN,
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    TemplateKeyField,
    VenueField,
)
from movements.models import (
    OPERATOR_DETAIL,
    AttentionReason,
    MovementEvent,
    MovementRequest,
    MovementRequestNode,
    NodeKind,
)
from movements.selectors import current_nodes, details_held, valid_approvals
from movements.states import RequestState
from qtg.core.money import format_amount
from qtg.core.venues import venue_choices

# The published bound; the service checks the setting itself (movement_create).
MAX_EXPIRES_IN_SECONDS = int(settings.QTG_MAX_APPROVAL_TTL.total_seconds())
MAX_REASON_LENGTH = 2000


# --- Errors ----------------------------------------------------------------------------------


class ProblemSerializer(serializers.Serializer):
    """An RFC 9457 problem (`application/problem+json`): the one shape of every 4xx and 5xx."""

    type = serializers.CharField(
        help_text="URI reference naming the problem type: `urn:qtg:problem:<code>`."
    )
    title = serializers.CharField(help_text="The HTTP status phrase, e.g. `Conflict`.")
    status = serializers.IntegerField(help_text="The HTTP status code of the response.")
    detail = serializers.CharField(help_text="What went wrong in this case, for a human.")
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. `invalid`.")
    details = serializers.DictField(
        child=serializers.JSONField(),
        help_text="Field errors (field name -> list of messages) or facts about the refusal, "
        "e.g. `current_state` on a 409.",
    )


# --- Input -----------------------------------------------------------------------------------


class MovementCreateInputSerializer(serializers.Serializer):
    template = TemplateKeyField(
        help_text="Key of an active route template: `GET /api/v1/templates/` lists them "
        "(with the params each takes). A string, not an enum: templates are read at run "
        "time; an unknown key is a 400."
    )
    asset = StrictCharField(pattern=ASSET_PATTERN, help_text="Asset code, e.g. `USDC`.")
    amount = StrictCharField(
        pattern=AMOUNT_PATTERN,
        help_text="Positive decimal string below 1e20 with at most 18 decimal places, e.g. "
        '`"100.50"`. JSON numbers are refused: a float cannot carry money exactly.',
    )
    source = VenueField(
        help_text="Where the funds are: a known venue (QTG_KNOWN_VENUES or a configured "
        "account) or a chain address."
    )
    destination = VenueField(
        help_text="Where the funds go: a known venue (QTG_KNOWN_VENUES or a configured "
        "account) or a chain address."
    )
    params = JSONObjectField(
        required=False,
        help_text="Template params. Params the template refuses give a FAILED movement with "
        "its `failure_reason`.",
    )
    expires_in_seconds = StrictIntegerField(
        required=False,
        min_value=1,
        max_value=MAX_EXPIRES_IN_SECONDS,
        help_text="Approval window; the server default applies when absent, and it is at most "
        "QTG_MAX_APPROVAL_TTL_SECONDS (default 24 hours).",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        venues = venue_choices()
        self.fields["source"].choices = venues
        self.fields["destination"].choices = venues


class ReasonInputSerializer(serializers.Serializer):
    reason = StrictCharField(
        pattern=NOT_BLANK_PATTERN,
        max_length=MAX_REASON_LENGTH,
        help_text="Why (not blank); recorded in the audit trail.",
    )


class CancelInputSerializer(ReasonInputSerializer):
    acknowledge_funds_in_transit = StrictBooleanField(
        required=False,
        default=False,
        help_text="Required (true) once a side effect completed: cancelling then stops "
        "watching the funds in transit and keeps the reservation HELD. Without it such a "
        "cancel is a 409 with code acknowledgement_required.",
    )


class ResumeInputSerializer(serializers.Serializer):
    node_key = StrictCharField(
        pattern=NODE_KEY_PATTERN,
        required=False,
        help_text="The manual gate to release; needed only when several are waiting.",
    )
    note = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=MAX_REASON_LENGTH,
        help_text="Recorded in the audit trail.",
    )


# --- Output ----------------------------------------------------------------------------------


class RouteTemplateNodeSerializer(serializers.Serializer):
    key = serializers.CharField()
    kind = serializers.ChoiceField(choices=NodeKind.choices)
    has_side_effect = serializers.BooleanField()


class RouteTemplateEdgeSerializer(serializers.Serializer):
    source = serializers.CharField(help_text="Key of the node that must complete first.")
    target = serializers.CharField(help_text="Key of the node it unblocks.")


class RouteTemplateSerializer(serializers.Serializer):
    key = serializers.CharField()
    version = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField()
    nodes = serializers.SerializerMethodField()
    edges = serializers.SerializerMethodField()

    @extend_schema_field(RouteTemplateNodeSerializer(many=True))
    def get_nodes(self, template) -> list[dict[str, Any]]:
        return [
            {
                "key": node["key"],
                "kind": node["kind"],
                "has_side_effect": bool(node.get("has_side_effect", False)),
            }
            for node in template.definition["nodes"]
        ]

    @extend_schema_field(RouteTemplateEdgeSerializer(many=True))
    def get_edges(self, template) -> list[dict[str, str]]:
        return [
            {"source": node["key"], "target": target}
            for node in template.definition["nodes"]
            for target in node.get("on_success", [])
        ]


class TemplateParamSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The key to use in the create body's `params`.")
    type = serializers.CharField(help_text="JSON type: string, integer, number or boolean.")
    required = serializers.BooleanField()
    default = serializers.JSONField(help_text="Used when absent (any JSON value; null: none).")
    choices = serializers.ListField(
        child=serializers.JSONField(),
        allow_null=True,
        help_text="The only values it takes; null when any value of its type does.",
    )


class TemplateSerializer(RouteTemplateSerializer):
    """A template a movement may follow, as discovery shows it: what to send to create one."""

    assets = serializers.SerializerMethodField()
    params = serializers.SerializerMethodField()

    @extend_schema_field({"type": ["array", "null"], "items": {"type": "string"}})
    def get_assets(self, template) -> list[str] | None:
        """The only assets it moves; null when it takes any asset."""
        return list(template.definition.get("assets") or []) or None

    @extend_schema_field(TemplateParamSerializer(many=True))
    def get_params(self, template) -> list[dict[str, Any]]:
        return [
            {
                "name": name,
                "type": declaration.get("type", "string"),
                "required": bool(declaration.get("required", False)),
                "default": declaration.get("default"),
                "choices": declaration.get("choices"),
            }
            for name, declaration in sorted((template.definition.get("params") or {}).items())
        ]


class VenueSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="What to send as `source` or `destination`.")
    kind = serializers.ChoiceField(
        choices=["chain_account", "exchange_account", "listed"],
        help_text="A configured chain account, a configured exchange account, or a venue "
        "listed in QTG_KNOWN_VENUES.",
    )
    chain = serializers.CharField(allow_null=True, help_text="The chain of a chain account.")
    chain_kind = serializers.CharField(allow_null=True, help_text="evm or solana.")
    exchange = serializers.CharField(
        allow_null=True, help_text="The exchange of an exchange account."
    )
    assets = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="The assets configured for it; null when not restricted here.",
    )


class ReservationSerializer(serializers.Serializer):
    state = serializers.CharField(help_text="HELD, CONSUMED or RELEASED.")
    amount = serializers.CharField(help_text="Decimal string.")


class MovementNodeSerializer(serializers.ModelSerializer):
    external_ref = serializers.SerializerMethodField()

    class Meta:
        model = MovementRequestNode
        fields = [
            "node_key",
            "kind",
            "node_state",
            "has_side_effect",
            "attempt",
            "external_ref",
            "state_changed_at",
        ]
        # Output only: every field is always present (null where it has no value).
        read_only_fields = fields

    def get_external_ref(self, node: MovementRequestNode) -> str | None:
        """The venue's id for what the node did (txid, withdrawal id), once there is one."""
        return node.external_ref or None


class AttentionSerializer(serializers.Serializer):
    node_key = serializers.CharField(help_text="The node concerned ('' for the movement).")
    reason = serializers.ChoiceField(choices=[r.value for r in AttentionReason])
    since = serializers.DateTimeField(help_text="When the condition began.")
    message = serializers.CharField()


class ApprovalSerializer(serializers.Serializer):
    by = serializers.CharField(help_text="Who approved (username).")
    at = serializers.DateTimeField(help_text="When.")


@functools.cache
def shared_serializer(serializer_class: type, *, many: bool = False) -> serializers.BaseSerializer:
    """One serializer of ``serializer_class`` per process, for ``to_representation`` only.
    Building a ModelSerializer's fields costs more than representing a row with them, and
    the outbox represents a movement with every callback event; these serializers read no
    context and keep no state between calls."""
    return serializer_class(many=many)


class MovementSerializer(serializers.ModelSerializer):
    template = serializers.CharField(source="template_key")
    amount = serializers.SerializerMethodField()
    current_frontier = serializers.ListField(child=serializers.CharField())
    params = serializers.DictField(child=serializers.JSONField())
    request_state = serializers.ChoiceField(choices=[s.value for s in RequestState])
    failure_reason = serializers.SerializerMethodField()
    created_by = serializers.SerializerMethodField()
    approved_by = serializers.SerializerMethodField()
    withdrawn_by = serializers.SerializerMethodField()
    approvals = serializers.SerializerMethodField()
    reservation = serializers.SerializerMethodField()
    nodes = serializers.SerializerMethodField()
    attention = serializers.SerializerMethodField()

    class Meta:
        model = MovementRequest
        fields = [
            "id",
            "request_state",
            "template",
            "template_version",
            "asset",
            "amount",
            "source",
            "destination",
            "params",
            "current_frontier",
            "expires_at",
            "created_at",
            "updated_at",
            "created_by",
            "approved_by",
            "approved_at",
            "approvals_required",
            "approvals",
            "failure_reason",
            "withdrawn_by",
            "reservation",
            "nodes",
            "attention",
        ]
        # Output only: every field is always present (null where it has no value).
        read_only_fields = fields

    @extend_schema_field(AttentionSerializer(many=True))
    def get_attention(self, movement: MovementRequest) -> list[dict[str, Any]]:
        """What needs a person now (open, not snoozed): a node waiting longer than its
        venue should take, a late answer contradicting a conclusion, ..."""
        entries = getattr(movement, "open_attentions_list", None)
        if entries is None:
            entries = movement.attentions.filter(resolved_at__isnull=True)
        now = timezone.now()
        return shared_serializer(AttentionSerializer, many=True).to_representation(
            [entry for entry in entries if entry.needs_someone(now)]
        )

    @extend_schema_field(OpenApiTypes.STR)
    def get_amount(self, movement: MovementRequest) -> str:
        return format_amount(movement.amount)

    def get_failure_reason(self, movement: MovementRequest) -> str | None:
        """Why the movement failed, was rejected, expired or was cancelled."""
        return movement.failure_reason or None

    def get_created_by(self, movement: MovementRequest) -> str | None:
        return movement.created_by.get_username() if movement.created_by_id else None

    def get_approved_by(self, movement: MovementRequest) -> str | None:
        return movement.approved_by.get_username() if movement.approved_by_id else None

    def get_withdrawn_by(self, movement: MovementRequest) -> str | None:
        """Who withdrew the movement while it waited for approval (its creator or a
        supervisor; it is then REJECTED with the reason in `failure_reason`); null otherwise."""
        return movement.withdrawn_by.get_username() if movement.withdrawn_by_id else None

    @extend_schema_field(ApprovalSerializer(many=True))
    def get_approvals(self, movement: MovementRequest) -> list[dict[str, Any]]:
        """The approvals that count so far (an approval voided by a change is not listed);
        the movement is APPROVED once there are ``approvals_required`` of them and its
        policy's groups are covered."""
        return shared_serializer(ApprovalSerializer, many=True).to_representation(
            [
                {
                    "by": a.approved_by.get_username() if a.approved_by_id else a.approver,
                    "at": a.approved_at,
                }
                for a in valid_approvals(movement)
            ]
        )

    @extend_schema_field(ReservationSerializer(allow_null=True))
    def get_reservation(self, movement: MovementRequest) -> dict[str, str] | None:
        try:
            reservation = movement.reservation
        except (AttributeError, ObjectDoesNotExist):
            return None
        return {"state": reservation.state, "amount": format_amount(reservation.amount)}

    @extend_schema_field(MovementNodeSerializer(many=True))
    def get_nodes(self, movement: MovementRequest) -> list[dict[str, Any]]:
        nodes = getattr(movement, "current_nodes_list", None)
        if nodes is None:
            nodes = current_nodes(movement)
        return shared_serializer(MovementNodeSerializer, many=True).to_representation(nodes)


class MovementEventSerializer(serializers.ModelSerializer):
    node_key = serializers.SerializerMethodField()
    old_state = serializers.SerializerMethodField()
    new_state = serializers.SerializerMethodField()
    detail = serializers.DictField(child=serializers.JSONField())

    class Meta:
        model = MovementEvent
        fields = [
            "node_key",
            "kind",
            "old_state",
            "new_state",
            "actor_type",
            "actor_id",
            "detail",
            "created_at",
        ]
        read_only_fields = fields

    def to_representation(self, event: MovementEvent) -> dict[str, Any]:
        data = super().to_representation(event)
        # Operators' part of the evidence (the platform-wide amount in flight) stays in the
        # admin.
        data["detail"] = {k: v for k, v in data["detail"].items() if k != OPERATOR_DETAIL}
        return data

    def get_node_key(self, event: MovementEvent) -> str | None:
        """The node the event is about; null for the request itself."""
        return event.node_key or None

    def get_old_state(self, event: MovementEvent) -> str | None:
        """Null on the creation event and on records without a state change."""
        return event.old_state or None

    def get_new_state(self, event: MovementEvent) -> str | None:
        """Null on records without a state change."""
        return event.new_state or None


def created_representation(movement: MovementRequest) -> dict[str, Any] | None:
    """The API representation of a movement its create just wrote, from the rows the create
    holds (``created_nodes``; nothing approved, no attention yet): None when the create did
    not keep them (refused by a hardcap: read it instead)."""
    nodes = getattr(movement, "created_nodes", None)
    if nodes is None:
        return None
    with details_held(movement, nodes=nodes, approvals=[], attentions=[]):
        return MovementSerializer(movement).data

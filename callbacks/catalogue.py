"""The event catalogue as the OpenAPI document's ``webhooks`` section (OpenAPI 3.1): one entry
per event type, with when it is sent and its payload's schema (``type`` fixed to the event's
name, ``context`` with the fields the event adds). Written from ``callbacks.events``."""

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiWebhook, extend_schema
from rest_framework import serializers

from callbacks.api import WEBHOOK_DELIVERY_DESCRIPTION, EventSerializer
from callbacks.events import EVENT_CATALOGUE
from callbacks.services import PAYLOAD_VERSION

FIELD_TYPES = {
    "string": lambda help_text: serializers.CharField(help_text=help_text),
    "integer": lambda help_text: serializers.IntegerField(help_text=help_text),
    "array": lambda help_text: serializers.ListField(
        child=serializers.CharField(), help_text=help_text
    ),
}
# The context fields an event carries only in some cases (required where always present).
OPTIONAL_CONTEXT = {("request_attention", "previous_state")}


def _camel(event_type: str) -> str:
    return "".join(part.capitalize() for part in event_type.replace(".", "_").split("_"))


def _context_serializer(event_type: str, fields: dict[str, tuple[str, str]]) -> type:
    attrs: dict[str, Any] = {}
    for name, (kind, help_text) in fields.items():
        field = FIELD_TYPES[kind](help_text)
        field.required = (event_type, name) not in OPTIONAL_CONTEXT
        attrs[name] = field
    if event_type == "request_rejected":
        attrs["withdrawn_by"] = serializers.CharField(
            required=False, help_text="Who withdrew it (a withdrawal only)."
        )
        attrs["reason"] = serializers.CharField(
            required=False, help_text="Why it was withdrawn (a withdrawal only)."
        )
    if event_type == "request_attention":
        # A node's attention (the same fields as node_attention).
        for name, (kind, help_text) in EVENT_CATALOGUE["node_attention"]["context"].items():
            field = FIELD_TYPES[kind](help_text)
            field.required = False
            attrs[name] = field
    attrs["Meta"] = type("Meta", (), {"ref_name": f"{_camel(event_type)}Context"})
    return type(f"{_camel(event_type)}ContextSerializer", (serializers.Serializer,), attrs)


def _event_serializer(event_type: str, entry: dict[str, Any]) -> type:
    if entry["context"]:
        context = _context_serializer(event_type, entry["context"])(
            help_text="What this event adds to the movement."
        )
    else:
        context = serializers.DictField(
            child=serializers.JSONField(), help_text="Nothing yet: an empty object."
        )
    attrs = {
        "type": serializers.ChoiceField(choices=[event_type], help_text="The event type."),
        "context": context,
        **(
            {
                "data": serializers.DictField(
                    child=serializers.JSONField(),
                    help_text="The signed checkpoint, as written to the checkpoint file.",
                )
            }
            if entry.get("data") == "checkpoint"
            else {}
        ),
        "Meta": type("Meta", (), {"ref_name": f"{_camel(event_type)}Event"}),
    }
    return type(f"{_camel(event_type)}EventSerializer", (EventSerializer,), attrs)


def _example(event_type: str, entry: dict[str, Any]) -> dict[str, Any]:
    samples = {"string": "EXECUTING", "integer": 1, "array": ["withdraw"]}
    return {
        "id": "5f0c1b1e-3f8e-4a55-9a8d-2b0a6c3e9d11",
        "type": event_type,
        "timestamp": "2026-12-01T10:05:00Z",
        "version": PAYLOAD_VERSION,
        "data": {"id": "0b6f3c52-6a5e-4f3e-9d55-2f1e8c1b7a10", "sequence": 3},
        "context": {name: samples[kind] for name, (kind, _) in entry["context"].items()},
    }


WEBHOOKS = [
    OpenApiWebhook(
        name=event_type,
        decorator=extend_schema(
            summary=entry["when"].split(":")[0].rstrip("."),
            description=f"{entry['when']}\n\n{WEBHOOK_DELIVERY_DESCRIPTION}",
            tags=["events"],
            request=_event_serializer(event_type, entry),
            responses={200: None},
            examples=[
                OpenApiExample(event_type, value=_example(event_type, entry), request_only=True)
            ],
        ),
    )
    for event_type, entry in EVENT_CATALOGUE.items()
]

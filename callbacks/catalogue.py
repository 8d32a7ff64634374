"""The event catalogue as the OpenAPI document's ``webhooks`` section (OpenAPI 3.1): one entry
per event type, with when it is sent and its payload's schema (``type`` fixed to the event's
name, ``context`` with the fields the event adds). Written from ``callbacks.events``."""

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiWebhook, extend_schema
from rest_framework import serializers

from callbacks.api import WEBHOOK_DELIVERY_DESCRIPTION, EventSerializer
from callbacks.events import EVENT_CATALOGUE
from callbacks.services import PAYLOAD_VERSION
from movements import public

FIELD_TYPES = {
    "string": serializers.CharField,
    "integer": serializers.IntegerField,
    "array": lambda **kwargs: serializers.ListField(child=serializers.CharField(), **kwargs),
}


def _camel(event_type: str) -> str:
    return "".join(part.capitalize() for part in event_type.replace(".", "_").split("_"))


def _context_serializer(event_type: str, entry: dict[str, Any]) -> type:
    attrs: dict[str, Any] = {}
    for name, (kind, help_text) in entry["context"].items():
        # Required where always present (the catalogue names the others).
        attrs[name] = FIELD_TYPES[kind](
            help_text=help_text, required=name not in entry.get("optional", ())
        )
    attrs["Meta"] = type("Meta", (), {"ref_name": f"{_camel(event_type)}Context"})
    return type(f"{_camel(event_type)}ContextSerializer", (serializers.Serializer,), attrs)


def _event_serializer(event_type: str, entry: dict[str, Any]) -> type:
    if entry["context"]:
        context = _context_serializer(event_type, entry)(
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
    """The catalogue's example of the event, as its webhook body: the movement as the API
    shows it in the state it was then, with its sequence."""
    example = entry["example"]
    data = example.get("data")
    if data is None:
        data = {
            **public.MOVEMENT_EXAMPLE,
            "request_state": example["state"],
            "sequence": example["sequence"],
        }
    return {
        "id": "5f0c1b1e-3f8e-4a55-9a8d-2b0a6c3e9d11",
        "type": event_type,
        "timestamp": "2026-12-01T10:05:00Z",
        "version": PAYLOAD_VERSION,
        "data": data,
        "context": example["context"],
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
            # drf-spectacular builds a webhook's body from the receiver's side (a response),
            # so the example is not marked request_only: that would drop it.
            examples=[OpenApiExample(event_type, value=_example(event_type, entry))],
        ),
    )
    for event_type, entry in EVENT_CATALOGUE.items()
]

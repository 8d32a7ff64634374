"""URLs and requests of the operator console, for the tests."""

from django.contrib.messages import get_messages
from django.urls import reverse


def changelist_url() -> str:
    return reverse("admin:movements_movementrequest_changelist")


def change_url(movement) -> str:
    return reverse("admin:movements_movementrequest_change", args=[movement.pk])


def action_url(movement, name: str) -> str:
    return reverse("admin:movements_movementrequest_action", args=[movement.pk, name])


def post_action(client, movement, name: str, data: dict | None = None):
    return client.post(action_url(movement, name), {"post": "yes", **(data or {})})


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]

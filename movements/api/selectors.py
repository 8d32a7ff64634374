"""Reads behind the API: what a client may see, and the rows one response needs."""

from pathlib import Path

from django.conf import settings
from django.core.exceptions import FieldDoesNotExist
from django.db.models import Prefetch, QuerySet

from movements.models import MovementRequest, MovementRequestNode, RouteTemplate
from movements.services.templates import route_templates_sync

VIEW_ALL_PERMISSIONS = ("movements.view_movementrequest", "movements.change_movementrequest")


def route_templates_current() -> list[RouteTemplate]:
    """The newest active version of every template (the files are loaded on first use)."""
    # Loading is idempotent and each file commits on its own, so a request that arrives while
    # another is still loading must load too rather than trust a non-empty, partial table.
    files = len(list(Path(settings.QTG_ROUTE_TEMPLATE_DIR).glob("*.yaml")))
    if RouteTemplate.objects.count() < files:
        route_templates_sync()
    newest: dict[str, RouteTemplate] = {}
    for template in RouteTemplate.objects.filter(is_active=True).order_by("key", "-version"):
        newest.setdefault(template.key, template)
    return list(newest.values())


def movements_with_details() -> QuerySet[MovementRequest]:
    """Movements with what their API representation reads: users, current nodes, reservation."""
    qs = MovementRequest.objects.select_related("created_by", "approved_by").prefetch_related(
        Prefetch(
            "nodes",
            queryset=MovementRequestNode.objects.current().order_by("plan_node__position", "pk"),
            to_attr="current_nodes_list",
        )
    )
    if has_reservation_relation():
        qs = qs.select_related("reservation")
    return qs


def movements_visible_to(user) -> QuerySet[MovementRequest]:
    """Everything for holders of the admin's view (or change) permission; otherwise the
    movements the client created itself."""
    qs = movements_with_details()
    if any(user.has_perm(perm) for perm in VIEW_ALL_PERMISSIONS):
        return qs
    return qs.filter(created_by=user)


def has_reservation_relation() -> bool:
    """True once the reservations app gives every request its one reservation."""
    try:
        MovementRequest._meta.get_field("reservation")
    except FieldDoesNotExist:
        return False
    return True

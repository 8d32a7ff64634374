"""Reads behind the API: what a client may see, and the rows one response needs."""

from django.db.models import Prefetch, QuerySet

from movements.models import (
    MovementApproval,
    MovementAttention,
    MovementRequest,
    MovementRequestNode,
    RouteTemplate,
)
from movements.services.templates import route_templates_ensure_loaded

VIEW_ALL_PERMISSIONS = ("movements.view_movementrequest", "movements.change_movementrequest")


def route_templates_current() -> list[RouteTemplate]:
    """The newest active version of every template (the files are loaded on first use)."""
    route_templates_ensure_loaded()
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
        ),
        Prefetch(
            "attentions",
            queryset=MovementAttention.objects.filter(resolved_at__isnull=True).order_by(
                "since", "pk"
            ),
            to_attr="open_attentions_list",
        ),
        Prefetch(
            "approvals",
            queryset=MovementApproval.objects.filter(void_at__isnull=True)
            .select_related("approved_by")
            .order_by("approved_at", "pk"),
            to_attr="valid_approvals_list",
        ),
    )
    return qs.select_related("reservation")


def movements_visible_to(user) -> QuerySet[MovementRequest]:
    """Everything for holders of the admin's view (or change) permission; otherwise the
    movements the client created itself."""
    qs = movements_with_details()
    if any(user.has_perm(perm) for perm in VIEW_ALL_PERMISSIONS):
        return qs
    return qs.filter(created_by=user)

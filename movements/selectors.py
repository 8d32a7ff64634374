"""Reads that are more than a one-liner."""

from typing import Any

from django.db.models import QuerySet

from movements.models import MovementEvent, MovementRequest, MovementRequestNode


def current_nodes(
    request: MovementRequest, *, lock: bool = False, writer: Any = None
) -> list[MovementRequestNode]:
    """The live attempt of every node of a request, in plan order; with a batch ``writer``
    (``state.batch()``), after what it holds is written, so the read sees it."""
    if writer is not None:
        writer.flush()
    qs = MovementRequestNode.objects.current().filter(request=request).select_related("plan_node")
    if lock:
        qs = qs.select_for_update(of=("self",), no_key=True)
    return list(qs.order_by("plan_node__position", "pk"))


def successor_keys(request: MovementRequest, node_key: str) -> list[str]:
    """Keys of the nodes the plan reaches from ``node_key`` along on_success edges."""
    return list(
        request.plan_edges.filter(source__key=node_key)
        .order_by("target__position")
        .values_list("target__key", flat=True)
    )


def predecessor_map(request: MovementRequest) -> dict[str, list[str]]:
    """For each node key of the plan, the keys of its predecessors."""
    preds: dict[str, list[str]] = {
        key: [] for key in request.plan_nodes.values_list("key", flat=True)
    }
    for source, target in request.plan_edges.values_list("source__key", "target__key"):
        preds[target].append(source)
    return preds


def request_events(request: MovementRequest) -> QuerySet[MovementEvent]:
    """The audit trail of a request, oldest first."""
    return request.events.order_by("created_at", "id")

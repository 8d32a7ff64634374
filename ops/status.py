"""Selectors for what an operator (``qtg_status``) and Prometheus (``/metrics``) read about the
movements: counts by state, money in flight, what needs a person, how far the workers are
behind, dead webhook deliveries."""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Sum
from django.utils import timezone

from callbacks.models import Delivery, DeliveryStatus
from movements.models import MovementRequest, MovementRequestNode
from movements.selectors import needing_attention_q
from movements.services.execution import oldest_due_since
from movements.states import NodeState, RequestState
from reservations.models import Reservation, ReservationState


@dataclass(frozen=True)
class Snapshot:
    movements_by_state: dict[str, int]
    in_flight_by_asset: dict[str, Decimal]
    nodes_unknown: int
    movements_needing_attention: int
    oldest_due_seconds: float
    dead_deliveries: int


def snapshot() -> Snapshot:
    """The numbers, read now."""
    now = timezone.now()
    counts = dict(
        MovementRequest.objects.values_list("request_state").annotate(n=Count("pk")).order_by()
    )
    held = (
        Reservation.objects.filter(state=ReservationState.HELD)
        .values_list("asset")
        .annotate(total=Sum("amount"))
        .order_by("asset")
    )
    oldest = oldest_due_since(now=now)
    return Snapshot(
        movements_by_state={state.value: counts.get(state.value, 0) for state in RequestState},
        in_flight_by_asset={asset: total for asset, total in held},
        nodes_unknown=MovementRequestNode.objects.current()
        .filter(node_state=NodeState.UNKNOWN)
        .count(),
        movements_needing_attention=MovementRequest.objects.filter(
            needing_attention_q(now)
        ).count(),
        oldest_due_seconds=max(0.0, (now - oldest).total_seconds()) if oldest else 0.0,
        dead_deliveries=Delivery.objects.filter(status=DeliveryStatus.DEAD).count(),
    )

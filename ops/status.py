"""Selectors for what an operator (``qtg_status``) and Prometheus (``/metrics``) read about the
movements: counts by state, money in flight, what needs a person, how far the workers are
behind, dead webhook deliveries."""

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Count, Exists, F, OuterRef, Q, Sum
from django.utils import timezone

from callbacks.models import Delivery, DeliveryStatus
from movements.models import MovementRequest, MovementRequestNode
from movements.selectors import needing_attention_q
from movements.services.execution import oldest_due_since
from movements.states import NodeState, RequestState
from reservations.models import Reservation, ReservationState

AWAITING_APPROVAL = "awaiting_approval"
NOT_YET_LEFT = "not_yet_left"
LEFT_NOT_ARRIVED = "left_not_arrived"
IN_INTERVENTION = "manual_intervention"
# Where the money a HELD reservation stands for is: different risks, never one sum.
MONEY_COLUMNS = (
    (AWAITING_APPROVAL, "Reserved, awaiting approval"),
    (NOT_YET_LEFT, "Reserved, running, nothing left yet"),
    (LEFT_NOT_ARRIVED, "Left a venue, not arrived"),
    (IN_INTERVENTION, "Held in MANUAL_INTERVENTION"),
)


def held_money(*, by_venue: bool = False) -> dict[tuple, Decimal]:
    """HELD reservations summed per asset (and source venue), and per place: awaiting
    approval, running with nothing gone, gone from a venue and not arrived (a side-effect
    node completed), held in MANUAL_INTERVENTION. Keys: (asset, [venue,] place)."""
    left = Exists(
        MovementRequestNode.objects.filter(
            request_id=OuterRef("request_id"),
            is_current=True,
            has_side_effect=True,
            node_state=NodeState.COMPLETED,
        )
    )
    held = Reservation.objects.filter(state=ReservationState.HELD).annotate(
        money_left=left, request_state=F("request__request_state")
    )
    pending, manual = RequestState.PENDING_APPROVAL, RequestState.MANUAL_INTERVENTION
    places = {
        AWAITING_APPROVAL: Q(request_state=pending),
        IN_INTERVENTION: Q(request_state=manual),
        LEFT_NOT_ARRIVED: Q(money_left=True) & ~Q(request_state=manual),
        NOT_YET_LEFT: Q(money_left=False) & ~Q(request_state__in=[pending, manual]),
    }
    fields = ("asset", "source") if by_venue else ("asset",)
    totals: dict[tuple, Decimal] = {}
    for place, condition in places.items():
        sums = held.filter(condition).values_list(*fields).annotate(total=Sum("amount"))
        for *key, total in sums.order_by():
            totals[(*key, place)] = total
    return totals


@dataclass(frozen=True)
class Snapshot:
    movements_by_state: dict[str, int]
    in_flight_by_asset: dict[str, Decimal]
    # The same money by where it is: {(asset, place): total} (``MONEY_COLUMNS``).
    held_by_asset_and_place: dict[tuple[str, str], Decimal]
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
        held_by_asset_and_place=held_money(),
        nodes_unknown=MovementRequestNode.objects.current()
        .filter(node_state=NodeState.UNKNOWN)
        .count(),
        movements_needing_attention=MovementRequest.objects.filter(
            needing_attention_q(now)
        ).count(),
        oldest_due_seconds=max(0.0, (now - oldest).total_seconds()) if oldest else 0.0,
        dead_deliveries=Delivery.objects.filter(status=DeliveryStatus.DEAD).count(),
    )

"""Reservations of hardcap headroom, one per movement request.

The movement lifecycle calls ``reservation_hold`` when it validates a request and the
post-transition table (movements/services/effects.py) calls ``reservation_consume`` /
``reservation_release``; operators settle what the table leaves HELD with
``reservation_settle``. Locks: the hardcap rows of a scope are locked (in primary-key order)
before the in-flight sum is read, so concurrent holds against one cap queue instead of both
seeing the same headroom. Consume and release only ever lower the in-flight sum and need no
hardcap lock.
"""

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Q, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from movements.interface import MovementRequest
from qtg.core.actors import Actor
from qtg.core.errors import InvalidInput, NotFound, ReservationRefused
from qtg.core.money import format_amount
from qtg.core.policies import enforce
from qtg.core.venues import canonical_venue
from reservations.models import Hardcap, Reservation, ReservationEvent, ReservationState
from reservations.policies import settle_permission_refusal, settle_refusal

VELOCITY_WINDOW = timedelta(hours=24)
ZERO = Decimal("0")

# Caps the embedded demo starts with (asset -> max in flight, max per rolling 24h).
DEMO_HARDCAPS: dict[str, tuple[Decimal, Decimal]] = {
    "USDC": (Decimal("1000000"), Decimal("5000000")),
    "USDT": (Decimal("1000000"), Decimal("5000000")),
    "BTC": (Decimal("25"), Decimal("100")),
    "ETH": (Decimal("500"), Decimal("2000")),
}


def _reserved_sum(cap: Hardcap, *, states: tuple[str, ...], since=None) -> Decimal:
    qs = Reservation.objects.filter(asset=cap.asset, state__in=states)
    if cap.source:
        qs = qs.filter(source=cap.source)
    if since is not None:
        qs = qs.filter(held_at__gte=since)
    return qs.aggregate(total=Coalesce(Sum("amount"), ZERO))["total"]


def hardcaps_for(*, asset: str, source: str, lock: bool = False) -> list[Hardcap]:
    """The active hardcaps whose scope covers a movement of ``asset`` from ``source``."""
    qs = Hardcap.objects.filter(is_active=True, asset=asset).filter(Q(source="") | Q(source=source))
    if lock:
        qs = qs.select_for_update()
    return list(qs.order_by("pk"))


def hardcap_in_flight(*, hardcap: Hardcap) -> Decimal:
    """The sum of HELD reservations in the hardcap's scope."""
    return _reserved_sum(hardcap, states=(ReservationState.HELD,))


def hardcap_used_24h(*, hardcap: Hardcap, now=None) -> Decimal:
    """HELD + CONSUMED reserved in the hardcap's scope over the last 24 hours."""
    since = (now or timezone.now()) - VELOCITY_WINDOW
    return _reserved_sum(
        hardcap, states=(ReservationState.HELD, ReservationState.CONSUMED), since=since
    )


def _check(cap: Hardcap, amount: Decimal, now) -> None:
    scope = {"hardcap": cap.pk, "scope": cap.scope_label, "asked": format_amount(amount)}
    in_flight = hardcap_in_flight(hardcap=cap)
    if in_flight + amount > cap.max_in_flight:
        figures = {"cap": format_amount(cap.max_in_flight), "in_flight": format_amount(in_flight)}
        raise ReservationRefused(
            f"{cap} refuses {scope['asked']} {cap.asset}: no room in flight now",
            details=scope,
            operator_message=f"{cap} refuses {scope['asked']} {cap.asset}: "
            f"{figures['in_flight']} already in flight, the cap is {figures['cap']}",
            operator_details=figures,
        )
    if cap.max_per_24h is not None:
        used = hardcap_used_24h(hardcap=cap, now=now)
        if used + amount > cap.max_per_24h:
            figures = {
                "limit_24h": format_amount(cap.max_per_24h),
                "used_24h": format_amount(used),
            }
            raise ReservationRefused(
                f"{cap} refuses {scope['asked']} {cap.asset}: its 24-hour limit has no room now",
                details=scope,
                operator_message=f"{cap} refuses {scope['asked']} {cap.asset}: "
                f"{figures['used_24h']} reserved in the last 24 hours, the 24-hour limit is "
                f"{figures['limit_24h']}",
                operator_details=figures,
            )


def _record(
    reservation: Reservation,
    *,
    old_state: str,
    actor: Actor,
    reason: str,
    request_state: str,
    detail: dict[str, Any] | None = None,
) -> ReservationEvent:
    return ReservationEvent.objects.create(
        reservation=reservation,
        old_state=old_state,
        new_state=reservation.state,
        request_state=request_state,
        actor_type=actor.type,
        actor_id=actor.id,
        reason=reason,
        detail=detail or {},
    )


@transaction.atomic
def reservation_hold(*, request: MovementRequest, actor: Actor) -> Reservation:
    """Hold the request's amount against its hardcaps; raise ReservationRefused (holding
    nothing) when no hardcap covers the scope or one of them has no room."""
    existing = Reservation.objects.filter(request=request).first()
    if existing is not None:
        return existing
    caps = hardcaps_for(asset=request.asset, source=request.source, lock=True)
    if not caps:
        raise ReservationRefused(
            f"no hardcap is configured for {request.asset} (from {request.source}): "
            f"movements without a hardcap are refused",
            details={"asset": request.asset, "source": request.source, "hardcap": None},
        )
    amount = Decimal(request.amount)
    now = timezone.now()
    for cap in caps:
        _check(cap, amount, now)
    reservation = Reservation.objects.create(
        request=request, asset=request.asset, source=request.source, amount=amount, held_at=now
    )
    _record(
        reservation,
        old_state="",
        actor=actor,
        request_state=request.request_state,
        reason=f"held against {', '.join(str(cap) for cap in caps)}",
        detail={"hardcaps": [cap.pk for cap in caps]},
    )
    return reservation


def _apply(
    reservation: Reservation,
    *,
    outcome: str,
    actor: Actor,
    reason: str,
    request_state: str,
    detail: dict[str, Any] | None = None,
) -> Reservation:
    old_state = reservation.state
    if outcome == ReservationState.CONSUMED:
        reservation.consume()
    else:
        reservation.release()
    reservation.settled_at = timezone.now()
    reservation.save(update_fields=["state", "settled_at", "updated_at"])
    _record(
        reservation,
        old_state=old_state,
        actor=actor,
        reason=reason,
        request_state=request_state,
        detail=detail,
    )
    return reservation


def _settle(
    *, request: MovementRequest, outcome: str, actor: Actor, reason: str
) -> Reservation | None:
    # Called from the post-transition table inside the request's transaction, without a
    # savepoint: if settling fails, the state change that asked for it fails with it.
    reservation = Reservation.objects.select_for_update().filter(request=request).first()
    if reservation is None or reservation.state != ReservationState.HELD:
        return reservation  # nothing held (refused, or already settled): idempotent no-op
    return _apply(
        reservation,
        outcome=outcome,
        actor=actor,
        reason=reason,
        request_state=request.request_state,
    )


@transaction.atomic(savepoint=False)
def reservation_consume(
    *, request: MovementRequest, actor: Actor, reason: str = ""
) -> Reservation | None:
    """The movement completed: the held amount is used up (no-op when nothing is held)."""
    return _settle(request=request, outcome=ReservationState.CONSUMED, actor=actor, reason=reason)


@transaction.atomic(savepoint=False)
def reservation_release(
    *, request: MovementRequest, actor: Actor, reason: str = ""
) -> Reservation | None:
    """The movement ended without money leaving: return the held amount (no-op when nothing
    is held)."""
    return _settle(request=request, outcome=ReservationState.RELEASED, actor=actor, reason=reason)


SETTLE_OUTCOMES = (ReservationState.CONSUMED, ReservationState.RELEASED)


@transaction.atomic
def reservation_settle(
    *, reservation: Reservation | Any, outcome: str, reason: str, actor: Actor
) -> Reservation:
    """An operator consumes or releases a reservation the post-transition table left HELD
    (a movement that ended FAILED or CANCELLED after money may have left), with a reason."""
    enforce(settle_permission_refusal(actor))
    if outcome not in SETTLE_OUTCOMES:
        raise InvalidInput(
            "outcome must be CONSUMED or RELEASED",
            details={"outcome": [f"not one of {', '.join(SETTLE_OUTCOMES)}"]},
        )
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput(
            "a reason is required to settle a reservation", details={"reason": ["required"]}
        )
    pk = reservation.pk if isinstance(reservation, Reservation) else reservation
    try:
        request_id = Reservation.objects.filter(pk=pk).values_list("request_id", flat=True).first()
    except (ValueError, TypeError):
        request_id = None
    if request_id is None:
        raise NotFound(f"reservation {pk} does not exist")
    # Lock order: the movement request before what hangs off it.
    request = MovementRequest.objects.select_for_update(no_key=True).get(pk=request_id)
    reservation = Reservation.objects.select_for_update().get(pk=pk)
    enforce(settle_refusal(actor=actor, reservation=reservation, movement=request))
    return _apply(
        reservation,
        outcome=outcome,
        actor=actor,
        reason=reason,
        request_state=request.request_state,
        detail={"manual": True},
    )


@transaction.atomic
def hardcap_ensure(
    *,
    asset: str,
    max_in_flight: Decimal | str,
    source: str = "",
    max_per_24h: Decimal | str | None = None,
    note: str = "",
) -> Hardcap:
    """Create the hardcap for a scope unless one exists (an existing cap is left as it is)."""
    asset = asset.strip().upper()
    cap, _ = Hardcap.objects.get_or_create(
        asset=asset,
        source=canonical_venue(source),
        defaults={
            "max_in_flight": Decimal(str(max_in_flight)),
            "max_per_24h": Decimal(str(max_per_24h)) if max_per_24h is not None else None,
            "note": note,
        },
    )
    return cap


def hardcap_ensure_demo_defaults() -> list[Hardcap]:
    """The demo assets' hardcaps (USDC, USDT, BTC, ETH), created where missing."""
    return [
        hardcap_ensure(asset=asset, max_in_flight=cap, max_per_24h=per_day, note="demo default")
        for asset, (cap, per_day) in DEMO_HARDCAPS.items()
    ]

"""Reservations of hardcap headroom, one per movement request.

The movement lifecycle calls ``reservation_hold`` when it validates a request and the
post-transition table (movements/services/effects.py) consumes or releases it through the
ledger (``ledger_consume`` / ``ledger_release``: in a worker's write batch, every movement the
batch ends is settled together, as ``reservation_consume`` / ``reservation_release`` settle
one); operators settle what the table leaves HELD with
``reservation_settle``. Locks: the hardcap rows of a scope are locked (in primary-key order)
before the in-flight sum is read, so concurrent holds against one cap queue instead of both
seeing the same headroom. A client's own holds awaiting approval are limited too (count, and a
share of each hardcap: ``ClientLimit``), so no client can tie a cap up with movements nobody
approved. Consume and release only ever lower the in-flight sum and need no
hardcap lock.
"""

import functools
import operator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from movements.public import MovementRequest, after_writes_together
from qtg.core.actors import Actor
from qtg.core.chain import GENESIS, heads_known
from qtg.core.compiled import Compiled
from qtg.core.errors import InvalidInput, NotFound, ReservationRefused
from qtg.core.money import format_amount
from qtg.core.policies import enforce
from qtg.core.venues import canonical_venue
from reservations.models import (
    ClientLimit,
    Hardcap,
    Reservation,
    ReservationEvent,
    ReservationState,
)
from reservations.policies import settle_permission_refusal, settle_refusal

VELOCITY_WINDOW = timedelta(hours=24)
ZERO = Decimal("0")

# Caps the embedded demo starts with (asset -> max in flight, max per rolling 24h).
DEMO_HARDCAPS: dict[str, tuple[Decimal, Decimal]] = {
    "USDC": (Decimal("1000000"), Decimal("5000000")),
    "USDT": (Decimal("1000000"), Decimal("5000000")),
    "BTC": (Decimal("25"), Decimal("100")),
    "ETH": (Decimal("500"), Decimal("2000")),
    "SOL": (Decimal("10000"), Decimal("50000")),
}


def _reserved_sum(cap: Hardcap, *, states: tuple[str, ...], since=None) -> Decimal:
    qs = Reservation.objects.filter(_scope(cap.asset, cap.source), state__in=states)
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


def _scope(asset: str, source: str) -> Q:
    """The reservations a cap of ``asset`` covers: from ``source`` only, or from any ("")."""
    return Q(asset=asset, **({"source": source} if source else {}))


def _sum_names(caps: int, client: bool) -> list[str]:
    """The figures ``_sums`` gives, in the order its statement reads them."""
    names = [name for i in range(caps) for name in (f"in_flight_{i}", f"used_{i}")]
    if client:
        names += ["client_count", *(f"client_held_{i}" for i in range(caps))]
    return names


def _sums_row(
    scoped: tuple[bool, ...], client: bool, *, since, assets, sources=(), user=None, request=None
) -> Any:
    """The one-row statement ``_sums`` runs: per cap (``assets[i]``, and the next of
    ``sources`` where ``scoped[i]``: a cap with a source covers that source only) in flight and
    used; for a ``client``, its holds awaiting approval other than ``request``'s."""
    remaining = iter(sources)
    scope = [
        _scope(asset, next(remaining) if has_source else "")
        for asset, has_source in zip(assets, scoped, strict=True)
    ]
    counting = Q(state=ReservationState.HELD) | Q(
        state=ReservationState.CONSUMED, held_at__gte=since
    )
    rows = counting & functools.reduce(operator.or_, scope)
    sums: dict[str, Any] = {}
    for i, cap_scope in enumerate(scope):
        sums[f"in_flight_{i}"] = Coalesce(
            Sum("amount", filter=cap_scope & Q(state=ReservationState.HELD)), ZERO
        )
        sums[f"used_{i}"] = Coalesce(
            Sum(
                "amount",
                filter=cap_scope
                & Q(
                    state__in=(ReservationState.HELD, ReservationState.CONSUMED),
                    held_at__gte=since,
                ),
            ),
            ZERO,
        )
    if client:
        pending = Q(
            state=ReservationState.HELD,
            request__created_by_id=user,
            request__request_state__in=PENDING_REQUEST_STATES,
        ) & ~Q(request=request)
        rows |= pending
        sums["client_count"] = Count("id", filter=pending)
        for i, cap_scope in enumerate(scope):
            sums[f"client_held_{i}"] = Coalesce(Sum("amount", filter=pending & cap_scope), ZERO)
    # Grouped by a constant, which is no column: no GROUP BY, so one row even when no
    # reservation counts (what ``aggregate()`` reads, as a queryset ``Compiled`` can hold).
    return (
        Reservation.objects.filter(rows)
        .order_by()
        .values(everything=Value(1))
        .annotate(**sums)
        .values_list(*_sum_names(len(assets), client))
    )


def _sums_compiled(sources: bool, client: bool) -> Compiled:
    markers: dict[str, Any] = {
        "since": lambda: Reservation._meta.get_field("held_at"),
        "assets": lambda: Reservation._meta.get_field("asset"),
    }
    if sources:
        markers["sources"] = lambda: Reservation._meta.get_field("source")
    if client:
        markers["user"] = lambda: MovementRequest._meta.get_field("created_by")
        markers["request"] = lambda: Reservation._meta.get_field("request")
    return Compiled(lambda scoped, **values: _sums_row(scoped, client, **values), **markers)


# One statement per (any cap with a source, a client's share checked), compiled once for each
# sequence of caps (which of them have a source) it meets.
_SUMS = {
    (sources, client): _sums_compiled(sources, client)
    for sources in (False, True)
    for client in (False, True)
}


def _sums(caps: list[Hardcap], now, user_id: Any, request: Any) -> dict[str, Any]:
    """What a hold decides on, in one query (it runs under the caps' row locks, which every
    hold of their scopes queues on): per cap, in flight (HELD) and used over the last 24
    hours (HELD + CONSUMED); for the client ``user_id`` (when given), how many of its holds
    await approval and how much of each cap they hold. Only the rows that can count are read:
    HELD, or CONSUMED within the 24 hours. Compiled once (``qtg.core.compiled``): building
    this aggregate through the ORM cost a create ~6 ms of CPU."""
    scoped = tuple(bool(cap.source) for cap in caps)
    client = user_id is not None
    values: dict[str, Any] = {
        "since": now - VELOCITY_WINDOW,
        "assets": [cap.asset for cap in caps],
    }
    if any(scoped):
        values["sources"] = [cap.source for cap in caps if cap.source]
    if client:
        values.update(user=user_id, request=request.pk)
    (row,) = _SUMS[(any(scoped), client)](scoped, **values)
    return dict(zip(_sum_names(len(caps), client), row, strict=True))


def _check(cap: Hardcap, amount: Decimal, in_flight: Decimal, used: Decimal) -> None:
    scope = {"hardcap": cap.pk, "scope": cap.scope_label, "asked": format_amount(amount)}
    if in_flight + amount > cap.max_in_flight:
        figures = {"cap": format_amount(cap.max_in_flight), "in_flight": format_amount(in_flight)}
        raise ReservationRefused(
            f"{cap} refuses {scope['asked']} {cap.asset}: no room in flight now",
            details=scope,
            operator_message=f"{cap} refuses {scope['asked']} {cap.asset}: "
            f"{figures['in_flight']} already in flight, the cap is {figures['cap']}",
            operator_details=figures,
        )
    if cap.max_per_24h is not None and used + amount > cap.max_per_24h:
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


def _record(reservation: Reservation, **fields: Any) -> ReservationEvent:
    event = _event(reservation, **fields)
    event.save(force_insert=True)
    return event


def _event(
    reservation: Reservation,
    *,
    old_state: str,
    actor: Actor,
    reason: str,
    request_state: str,
    detail: dict[str, Any] | None = None,
) -> ReservationEvent:
    return ReservationEvent(
        reservation=reservation,
        old_state=old_state,
        new_state=reservation.state,
        request_state=request_state,
        actor_type=actor.type,
        actor_id=actor.id,
        reason=reason,
        detail=detail or {},
    )


# Request states in which a held reservation is a "pending hold": nobody approved it yet.
PENDING_REQUEST_STATES = ("RECEIVED", "VALIDATED", "PENDING_APPROVAL")


@dataclass(frozen=True)
class PendingLimits:
    max_count: int
    max_share: Decimal


def client_pending_limits(user) -> PendingLimits:
    """The client's limits on holds awaiting approval: its own ClientLimit, else the most
    generous of its groups' (field by field), else the settings."""
    count = settings.QTG_CLIENT_MAX_PENDING_COUNT
    share = Decimal(str(settings.QTG_CLIENT_MAX_PENDING_SHARE))
    found = list(ClientLimit.objects.filter(Q(user=user) | Q(group__in=user.groups.all())))
    own = [row for row in found if row.user_id == user.pk]
    rows = own[:1] or [row for row in found if row.user_id is None]
    counts = [row.max_pending_count for row in rows if row.max_pending_count is not None]
    shares = [row.max_pending_share for row in rows if row.max_pending_share is not None]
    return PendingLimits(max(counts) if counts else count, max(shares) if shares else share)


def client_pending_holds(*, user_id: Any, asset: str | None = None, source: str = ""):
    """The client's HELD reservations whose movement awaits approval (in a cap's scope)."""
    qs = Reservation.objects.filter(
        state=ReservationState.HELD,
        request__created_by_id=user_id,
        request__request_state__in=PENDING_REQUEST_STATES,
    )
    if asset is not None:
        qs = qs.filter(asset=asset)
    if source:
        qs = qs.filter(source=source)
    return qs


def pending_holds_by_client(*, hardcap: Hardcap) -> list[dict[str, Any]]:
    """Per client, the holds awaiting approval in the hardcap's scope (for operators)."""
    qs = Reservation.objects.filter(
        state=ReservationState.HELD,
        asset=hardcap.asset,
        request__request_state__in=PENDING_REQUEST_STATES,
    )
    if hardcap.source:
        qs = qs.filter(source=hardcap.source)
    return list(
        qs.values("request__created_by__username")
        .annotate(count=Count("pk"), amount=Sum("amount"))
        .order_by("-amount")
    )


def _check_client(
    request: MovementRequest,
    caps: list[Hardcap],
    amount: Decimal,
    limits: PendingLimits,
    sums: dict[str, Any],
) -> None:
    """One client may not tie up the hardcaps with movements nobody approved yet."""
    user = request.created_by
    count = sums["client_count"]
    if count >= limits.max_count:
        raise ReservationRefused(
            f"{limits.max_count} movements of yours already await approval: the most a client "
            f"may have waiting; a new one is accepted once one of them is approved, rejected or "
            f"expires",
            details={"limit": "client_pending_count", "max_pending_count": limits.max_count},
        )
    for i, cap in enumerate(caps):
        allowed = cap.max_in_flight * limits.max_share
        held = sums[f"client_held_{i}"]
        if held + amount > allowed:
            raise ReservationRefused(
                f"{cap} refuses {format_amount(amount)} {cap.asset}: your movements awaiting "
                f"approval may hold at most {limits.max_share:%} of it",
                details={
                    "limit": "client_pending_share",
                    "hardcap": cap.pk,
                    "scope": cap.scope_label,
                    "max_pending_share": str(limits.max_share),
                },
                operator_message=f"{user} holds {format_amount(held)} {cap.asset} awaiting "
                f"approval; {format_amount(amount)} more passes the client share "
                f"({format_amount(allowed)})",
                operator_details={"client_pending": format_amount(held)},
            )


def _reservation_of(request: MovementRequest) -> Reservation | None:
    """The request's reservation: as its service said it is (``reservation_known``: the create
    knows the movement it just inserted has none), else read."""
    related = MovementRequest.reservation.related
    if related.is_cached(request):
        return related.get_cached_value(request)
    return Reservation.objects.filter(request=request).first()


@transaction.atomic(savepoint=False)
def reservation_hold(*, request: MovementRequest, actor: Actor) -> Reservation:
    """Hold the request's amount against its hardcaps; raise ReservationRefused (holding
    nothing) when no hardcap covers the scope or one of them has no room.

    Inside the caller's transaction without a savepoint of its own: a refusal is raised before
    anything is written, and the caller decides (the create rolls its transaction back whole
    and records the refusal in one of its own). The caps are locked last and for the fewest
    statements: after the lock, one aggregate, the reservation and its first event; the lock
    is held until the caller commits."""
    existing = _reservation_of(request)
    if existing is not None:
        return existing
    # Read before the lock: the client's limits are configuration, not the caps' headroom.
    limits = client_pending_limits(request.created_by) if request.created_by else None
    caps = hardcaps_for(asset=request.asset, source=request.source, lock=True)
    if not caps:
        raise ReservationRefused(
            f"no hardcap is configured for {request.asset} (from {request.source}): "
            f"movements without a hardcap are refused",
            details={"asset": request.asset, "source": request.source, "hardcap": None},
        )
    amount = Decimal(request.amount)
    now = timezone.now()
    client = request.created_by_id if limits is not None else None
    sums = _sums(caps, now, client, request)
    for i, cap in enumerate(caps):
        _check(cap, amount, sums[f"in_flight_{i}"], sums[f"used_{i}"])
    if limits is not None:
        _check_client(request, caps, amount, limits, sums)
    reservation = Reservation.objects.create(
        request=request, asset=request.asset, source=request.source, amount=amount, held_at=now
    )
    # Its first event opens the reservation's own audit stream: nothing to read before it.
    with heads_known({ReservationEvent: {reservation.pk: GENESIS}}):
        _record(
            reservation,
            old_state="",
            actor=actor,
            request_state=request.request_state,
            reason=f"held against {', '.join(str(cap) for cap in caps)}",
            detail={"hardcaps": [cap.pk for cap in caps]},
        )
    return reservation


def _move(reservation: Reservation, outcome: str, now: Any) -> str:
    """HELD -> ``outcome`` (CONSUMED, or RELEASED) on the instance, settled ``now``; returns
    the state it left. The caller saves it and records the event."""
    old_state = reservation.state
    if outcome == ReservationState.CONSUMED:
        reservation.consume()
    else:
        reservation.release()
    reservation.settled_at = now
    return old_state


def _apply(
    reservation: Reservation,
    *,
    outcome: str,
    actor: Actor,
    reason: str,
    request_state: str,
    detail: dict[str, Any] | None = None,
) -> Reservation:
    old_state = _move(reservation, outcome, timezone.now())
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


# Every movement that ends sends it, in the transaction of its last transition (a worker's
# write batch: once for all the movements it ends).
_LOCK_RESERVATIONS = Compiled(
    lambda *, requests: (
        Reservation.objects.select_for_update().filter(request_id__in=requests).order_by("pk")
    ),
    requests=MovementRequest._meta.pk,
)


@dataclass(frozen=True)
class _Settlement:
    request_id: Any
    request_state: str
    outcome: str
    actor: Actor
    reason: str


def _settle(
    *, request: MovementRequest, outcome: str, actor: Actor, reason: str
) -> Reservation | None:
    # Called from the post-transition table inside the request's transaction, without a
    # savepoint: if settling fails, the state change that asked for it fails with it.
    settlement = _Settlement(request.pk, request.request_state, outcome, actor, reason)
    return _settle_all([settlement]).get(request.pk)


@transaction.atomic(savepoint=False)
def _settle_all(settlements: list[_Settlement]) -> dict[Any, Reservation]:
    """Settle the held reservations of ``settlements``' movements (a movement's first
    settlement decides; one already settled, or none held, is left as it is: idempotent),
    with one lock, one update and one insert of their events for all of them. Returns each
    movement's reservation as it is now."""
    by_request: dict[Any, _Settlement] = {}
    for settlement in settlements:
        by_request.setdefault(settlement.request_id, settlement)
    reservations = _LOCK_RESERVATIONS(requests=sorted(by_request, key=str))
    now = timezone.now()
    settled, events = [], []
    for reservation in reservations:
        settlement = by_request[reservation.request_id]
        if reservation.state != ReservationState.HELD:
            continue  # nothing held (refused, or already settled): idempotent no-op
        old_state = _move(reservation, settlement.outcome, now)
        reservation.updated_at = now  # bulk_update does not run auto_now
        settled.append(reservation)
        events.append(
            _event(
                reservation,
                old_state=old_state,
                actor=settlement.actor,
                reason=settlement.reason,
                request_state=settlement.request_state,
            )
        )
    if settled:
        Reservation.objects.bulk_update(settled, ["state", "settled_at", "updated_at"])
        ReservationEvent.objects.bulk_create(events)
    return {reservation.request_id: reservation for reservation in reservations}


def _settle_after_writes(
    *, request: MovementRequest, outcome: str, actor: Actor, reason: str
) -> None:
    """The ledger's settle for the movements' post-transition table: in a worker's write
    batch, with the batch's other settlements once it has written its rows, before the hooks
    that read them (a callback payload shows the reservation settled); elsewhere at once."""
    settlement = _Settlement(request.pk, request.request_state, outcome, actor, reason)
    after_writes_together(_settle_all, settlement, first=True)


def ledger_consume(*, request: MovementRequest, actor: Actor, reason: str = "") -> None:
    """``reservation_consume`` for the movements' port (see ``_settle_after_writes``)."""
    _settle_after_writes(
        request=request, outcome=ReservationState.CONSUMED, actor=actor, reason=reason
    )


def ledger_release(*, request: MovementRequest, actor: Actor, reason: str = "") -> None:
    """``reservation_release`` for the movements' port (see ``_settle_after_writes``)."""
    _settle_after_writes(
        request=request, outcome=ReservationState.RELEASED, actor=actor, reason=reason
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
    """The demo assets' hardcaps (USDC, USDT, BTC, ETH, SOL), created where missing."""
    return [
        hardcap_ensure(asset=asset, max_in_flight=cap, max_per_24h=per_day, note="demo default")
        for asset, (cap, per_day) in DEMO_HARDCAPS.items()
    ]

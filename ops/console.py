"""What the console's home page shows, read from the database (nothing here writes).

- ``my_queue``: what the signed-in person can act on now, why, since when, oldest first: the
  movements whose actions their policies offer them (the same ``available_actions`` the
  movement page asks) and the open override proposals they may confirm.
- ``money_by_venue``: the money the held reservations stand for, per asset and source venue,
  split by where it is: reserved while the movement awaits approval, reserved while it runs
  and nothing has left yet, left a venue and not arrived (a side-effect node completed), and
  held in MANUAL_INTERVENTION. Those are different risks; adding them up (as a single "in
  flight" figure does) hides which is which.
- ``counts``: UNKNOWN nodes, stuck nodes, open attention by reason.
- ``venue_health``: what the workers last recorded of each venue (chain transactions' newest
  block and when it was seen, each exchange account's measured clock skew). No venue is asked
  from a page view.
- ``failing_subscriptions``: active webhook subscriptions with dead or retrying deliveries.
- ``settled_per_hour``, ``time_to_complete``, ``money_in_transit``: the charts' series (the
  last computed on a schedule with the gauges and read back by ``stored_money_in_transit``).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import accumulate
from typing import Any

from django.db.models import Avg, Count, F, Max, Min, Q
from django.db.models.functions import TruncHour
from django.utils import timezone

from callbacks.models import Delivery, DeliveryStatus, Subscription
from movements import policies, selectors
from movements.admin.actions import PageActor, Situation, available_actions
from movements.admin.filters import needs_me_count
from movements.models import (
    AttentionReason,
    MovementAttention,
    MovementRequest,
    MovementRequestNode,
    OverrideProposal,
    OverrideStatus,
)
from movements.selectors import actor_groups
from movements.states import (
    ATTENTION_REQUEST_STATES,
    TERMINAL_REQUEST_STATES,
    NodeState,
    RequestState,
)
from ops.models import GaugeSnapshot
from ops.status import held_money
from venues.cex.models import CexClock, CexRateBucket
from venues.models import ChainTransaction, TxState

# The queue looks at this many of the oldest movements waiting for a person (each is asked
# its policies); the list's "Needs me" filter has the rest.
QUEUE_CANDIDATES = 100
QUEUE_SHOWN = 50
# A chain transaction on its way: broadcast and not final yet.
OPEN_TX_STATES = (TxState.BROADCAST, TxState.PENDING, TxState.CONFIRMED)


@dataclass(frozen=True)
class QueueItem:
    kind: str  # "movement" or "proposal"
    pk: Any
    label: str
    why: str
    since: datetime
    actions: list[tuple[str, str]]  # (action name, label)
    amount: Decimal
    asset: str


@dataclass
class MoneyRow:
    asset: str
    venue: str
    amounts: dict[str, Decimal] = field(default_factory=dict)


def _why(movement: MovementRequest, now: datetime) -> tuple[str, datetime]:
    """Why the movement waits for a person, and since when (its state, or its oldest open
    attention entry when that is the reason)."""
    entries = [e for e in getattr(movement, "open_attentions_list", []) if e.needs_someone(now)]
    if movement.request_state in (
        RequestState.PENDING_APPROVAL,
        RequestState.WAITING_MANUAL_ACTION,
        RequestState.MANUAL_INTERVENTION,
    ):
        return str(movement.request_state), movement.state_changed_at
    if entries:
        first = min(entries, key=lambda e: e.since)
        return f"{first.get_reason_display()} ({first.node_key})", first.since
    return str(movement.request_state), movement.state_changed_at


def my_queue(user: Any, *, now: datetime | None = None) -> list[QueueItem]:
    """What ``user`` can act on now, oldest first."""
    now = now or timezone.now()
    actor = PageActor.for_user(user)
    groups = tuple(actor_groups(actor))
    # The list's "needs me" (a state that waits for a person, or an open attention entry) read
    # as two indexed queries: one OR with the attention EXISTS would scan every movement.
    # The oldest of each waiting state along the (state, since) index, merged: one query with
    # the three states would sort every waiting movement to find the oldest.
    oldest = []
    for state in sorted(ATTENTION_REQUEST_STATES):
        in_state = MovementRequest.objects.filter(request_state=state)
        if state == RequestState.PENDING_APPROVAL:
            # Four-eyes: nobody approves their own movement; leave those out before asking.
            in_state = in_state.exclude(created_by=user)
        oldest += in_state.order_by("state_changed_at", "pk").values_list("state_changed_at", "pk")[
            :QUEUE_CANDIDATES
        ]
    waiting = [pk for _, pk in sorted(oldest)[:QUEUE_CANDIDATES]]
    flagged = list(
        MovementAttention.objects.filter(resolved_at__isnull=True)
        .filter(Q(snoozed_until__isnull=True) | Q(snoozed_until__lte=now))
        .order_by("since")
        .values_list("request_id", flat=True)[:QUEUE_CANDIDATES]
    )
    candidates = selectors.with_decision_facts(
        MovementRequest.objects.filter(pk__in={*waiting, *flagged}).order_by(
            "state_changed_at", "pk"
        )
    )
    items = []
    for movement in candidates:
        offered = available_actions(
            Situation.of(movement, movement.live_nodes, user, groups=groups, actor=actor)
        )
        if not offered:
            continue
        why, since = _why(movement, now)
        items.append(
            QueueItem(
                kind="movement",
                pk=movement.pk,
                label=movement.short_id,
                why=why,
                since=since,
                actions=[(a.name, a.label) for a in offered],
                amount=movement.amount,
                asset=movement.asset,
            )
        )
    proposals = (
        OverrideProposal.objects.filter(status=OverrideStatus.PROPOSED, expires_at__gt=now)
        .exclude(proposed_by=user)
        .select_related("request", "proposed_by")
        .order_by("proposed_at")
    )
    for proposal in proposals:
        if policies.override_confirm_refusal(actor=actor, proposal=proposal, now=now) is not None:
            continue
        items.append(
            QueueItem(
                kind="proposal",
                pk=proposal.pk,
                label=proposal.request.short_id,
                why=(
                    f"{proposal.get_action_display()} proposed by {proposal.proposed_by} "
                    "awaits your confirmation"
                ),
                since=proposal.proposed_at,
                actions=[("confirm", "Confirm…")],
                amount=proposal.request.amount,
                asset=proposal.request.asset,
            )
        )
    items.sort(key=lambda item: item.since)
    return items[:QUEUE_SHOWN]


def money_by_venue() -> list[MoneyRow]:
    """Held reservations per asset and source venue, split by where the money is."""
    rows: dict[tuple[str, str], MoneyRow] = {}
    for (asset, venue, place), total in held_money(by_venue=True).items():
        rows.setdefault((asset, venue), MoneyRow(asset, venue)).amounts[place] = total
    return [rows[key] for key in sorted(rows)]


@dataclass(frozen=True)
class Counts:
    unknown_nodes: int
    stuck_nodes: int
    needs_someone: int
    attention_by_reason: list[tuple[str, str, int]]  # (reason, label, open entries)


def counts(*, now: datetime | None = None) -> Counts:
    now = now or timezone.now()
    open_now = MovementAttention.objects.filter(resolved_at__isnull=True).filter(
        Q(snoozed_until__isnull=True) | Q(snoozed_until__lte=now)
    )
    by_reason = dict(open_now.values_list("reason").annotate(n=Count("pk")).order_by())
    labels = dict(AttentionReason.choices)
    return Counts(
        unknown_nodes=MovementRequestNode.objects.current()
        .filter(node_state=NodeState.UNKNOWN)
        .count(),
        stuck_nodes=by_reason.get(AttentionReason.STUCK, 0),
        needs_someone=needs_me_count(),
        attention_by_reason=sorted(
            ((reason, labels.get(reason, reason), n) for reason, n in by_reason.items()),
            key=lambda r: (-r[2], r[0]),
        ),
    )


# An exchange clock measured longer ago than this says the account is not being reached.
CLOCK_STALE_SECONDS = 600


def venue_health(*, now: datetime | None = None) -> dict[str, Any]:
    """What was last recorded of each venue; nothing is asked of a venue here. Chains: the
    scheduled probe's heads per endpoint and their lag (``ops.venue_probe``, stored with the
    gauges) beside the newest block our own transactions were seen in; exchanges: each
    account's measured clock skew and when (a measurement is a successful round trip) and
    any block the exchange put on a credential; Iris: the probe's answer and any block."""
    now = now or timezone.now()
    stored = GaugeSnapshot.objects.filter(name="current").first()
    probe = (stored.values.get("venue_probe") if stored else None) or {}
    ours = {
        row["chain"]: row
        for row in ChainTransaction.objects.values("chain")
        .annotate(
            newest_block=Max("block_number"),
            seen_at=Max("state_changed_at"),
            open_txs=Count("pk", filter=Q(state__in=OPEN_TX_STATES)),
        )
        .order_by()
    }
    chains = []
    for measured in probe.get("chains", []):
        row = ours.pop(measured["chain"], {})
        lag, limit = measured.get("max_lag"), measured.get("lag_limit")
        chains.append(
            {
                **measured,
                "newest_block": row.get("newest_block"),
                "seen_at": row.get("seen_at"),
                "open_txs": row.get("open_txs", 0),
                "ok": measured.get("answering", 0) == len(measured.get("endpoints", []))
                and (lag is None or limit is None or lag <= limit),
            }
        )
    for name, row in sorted(ours.items()):  # transactions on a chain the probe did not list
        chains.append({"chain": name, "head": None, "endpoints": [], "ok": False, **row})
    blocks = {
        bucket.credential: bucket for bucket in CexRateBucket.objects.filter(blocked_until__gt=now)
    }
    exchanges = []
    for clock in CexClock.objects.order_by("account"):
        age = int((now - clock.measured_at).total_seconds())
        blocked = [b for key, b in blocks.items() if key.startswith(f"{clock.exchange}:")]
        exchanges.append(
            {
                "account": clock.account,
                "exchange": clock.exchange,
                "skew_ms": clock.skew_ms,
                "uncertainty_ms": clock.uncertainty_ms,
                "measured_at": clock.measured_at,
                "age_seconds": age,
                "reachable": age <= CLOCK_STALE_SECONDS and not blocked,
                "blocked_until": blocked[0].blocked_until if blocked else None,
                "blocked_reason": blocked[0].blocked_reason if blocked else "",
            }
        )
    iris = []
    for service in probe.get("iris", []):
        blocked = [b for key, b in blocks.items() if key.startswith("iris:")]
        iris.append(
            {
                **service,
                "ok": service.get("reachable", False) and not blocked,
                "blocked_until": blocked[0].blocked_until if blocked else None,
            }
        )
    return {
        "chains": chains,
        "exchanges": exchanges,
        "iris": iris,
        "probed_at": stored.computed_at if stored and probe else None,
    }


@dataclass(frozen=True)
class FailingSubscription:
    pk: Any
    name: str
    url: str
    dead: int
    retrying: int
    last_error: str


def failing_subscriptions() -> list[FailingSubscription]:
    """Active subscriptions with dead deliveries or deliveries being retried."""
    rows = (
        Subscription.objects.filter(is_active=True, deleted_at__isnull=True)
        .annotate(
            dead=Count("deliveries", filter=Q(deliveries__status=DeliveryStatus.DEAD)),
            retrying=Count(
                "deliveries",
                filter=Q(deliveries__status=DeliveryStatus.PENDING, deliveries__attempts__gt=0),
            ),
        )
        .filter(Q(dead__gt=0) | Q(retrying__gt=0))
        .order_by("-dead", "name")
    )
    result = []
    for sub in rows:
        last = (
            Delivery.objects.filter(subscription=sub, last_attempt_at__isnull=False)
            .exclude(status=DeliveryStatus.DELIVERED)
            .order_by("-last_attempt_at")
            .values_list("last_error", "last_status_code")
            .first()
        )
        error = ""
        if last:
            error = last[0] or (f"HTTP {last[1]}" if last[1] else "")
        result.append(FailingSubscription(sub.pk, sub.name, sub.url, sub.dead, sub.retrying, error))
    return result


def settled_per_hour(*, now: datetime | None = None, hours: int = 24) -> list[tuple[datetime, int]]:
    """Movements that reached COMPLETED in each of the last ``hours`` hours (oldest first)."""
    now = now or timezone.now()
    start = (now - timedelta(hours=hours - 1)).replace(minute=0, second=0, microsecond=0)
    per_hour = dict(
        MovementRequest.objects.filter(
            request_state=RequestState.COMPLETED, state_changed_at__gte=start
        )
        .annotate(hour=TruncHour("state_changed_at"))
        .values_list("hour")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return [
        (start + timedelta(hours=i), per_hour.get(start + timedelta(hours=i), 0))
        for i in range(hours)
    ]


def money_in_transit(*, now: datetime | None = None, hours: int = 24) -> dict[str, list]:
    """Per asset, the money that had left a venue and not arrived at the end of each of the
    last ``hours`` hours (oldest first; the last point is now): a movement's money left when
    its first side-effect node COMPLETED and arrived when the movement finished (a terminal
    state). Only movements still open, or finished inside the window, can count: one grouped
    query over their completed side-effect nodes, then each movement adds its amount to the
    hours between leaving and arriving."""
    now = now or timezone.now()
    start = (now - timedelta(hours=hours - 1)).replace(minute=0, second=0, microsecond=0)
    points = [min(start + timedelta(hours=i + 1), now) for i in range(hours)]
    terminal = sorted(TERMINAL_REQUEST_STATES)
    rows = (
        MovementRequestNode.objects.filter(
            has_side_effect=True, node_state=NodeState.COMPLETED, state_changed_at__lt=now
        )
        .filter(
            ~Q(request__request_state__in=terminal)
            | Q(request__request_state__in=terminal, request__state_changed_at__gte=start)
        )
        .values_list(
            "request_id",
            "request__asset",
            "request__amount",
            "request__request_state",
            "request__state_changed_at",
        )
        .annotate(left_at=Min("state_changed_at"))
        .order_by()
    )
    changes: dict[str, list[Decimal]] = {}
    for _, asset, amount, state, changed, left_at in rows:
        steps = changes.setdefault(asset, [Decimal(0)] * (hours + 1))
        arrived = changed if state in TERMINAL_REQUEST_STATES else None
        # It counts at each point from the first at or after it left, up to the first at or
        # after it arrived.
        steps[bisect_left(points, left_at)] += amount
        steps[bisect_left(points, arrived) if arrived else hours] -= amount
    return {
        asset: [
            (start + timedelta(hours=i), total) for i, total in enumerate(accumulate(steps[:-1]))
        ]
        for asset, steps in sorted(changes.items())
    }


def stored_money_in_transit() -> tuple[datetime | None, dict[str, list]]:
    """``money_in_transit`` as the gauges refresh last computed it (``ops.gauges``), and when;
    the home page reads this instead of a day's history on every view."""
    stored = GaugeSnapshot.objects.filter(name="current").first()
    if stored is None or "money_in_transit" not in stored.values:
        return None, {}
    return stored.computed_at, {
        asset: [(datetime.fromisoformat(hour), Decimal(total)) for hour, total in series]
        for asset, series in stored.values["money_in_transit"].items()
    }


def time_to_complete(*, now: datetime | None = None, days: int = 7) -> list[tuple[str, float]]:
    """Mean seconds from creation to COMPLETED per template, over the last ``days`` days."""
    now = now or timezone.now()
    rows = (
        MovementRequest.objects.filter(
            request_state=RequestState.COMPLETED,
            state_changed_at__gte=now - timedelta(days=days),
        )
        .values_list("template_key")
        .annotate(mean=Avg(F("state_changed_at") - F("created_at")))
        .order_by("template_key")
    )
    return [(key, mean.total_seconds()) for key, mean in rows if mean is not None]

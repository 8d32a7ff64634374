"""Changelist filters of the operator console: state (with "needs me") and a date range."""

from datetime import date, datetime, time, timedelta
from functools import cached_property

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date

from movements.models import MovementAttention, MovementRequest, RouteTemplate
from movements.selectors import needing_attention_q
from movements.states import ATTENTION_REQUEST_STATES, RequestState

NEEDS_ME = "needs_me"


def needs_me_q() -> Q:
    """What waits for a person: approvals, manual gates, MANUAL_INTERVENTION, and movements
    with an open, unsnoozed attention entry (a node stuck longer than its venue should take)."""
    return Q(request_state__in=sorted(ATTENTION_REQUEST_STATES)) | needing_attention_q()


def needs_me_count(movements: QuerySet | None = None) -> int:
    """How many of ``movements`` (every movement by default) ``needs_me_q`` selects, counted
    as two indexed counts (the OR with the attention EXISTS would probe every movement for its
    entries): the waiting states, plus the movements in any other state with an open,
    unsnoozed attention entry, found from those entries."""
    movements = MovementRequest.objects.all() if movements is None else movements
    now = timezone.now()
    waiting = sorted(ATTENTION_REQUEST_STATES)
    entries = MovementAttention.objects.filter(resolved_at__isnull=True).filter(
        Q(snoozed_until__isnull=True) | Q(snoozed_until__lte=now)
    )
    flagged = (
        movements.exclude(request_state__in=waiting)
        .filter(pk__in=entries.values("request_id"))
        .count()
    )
    return movements.filter(request_state__in=waiting).count() + flagged


class NeedsMePaginator(Paginator):
    """The pages of a list filtered by ``needs_me_q`` (and whatever else), counted by
    ``needs_me_count``; the page itself reads along the list's order and stops when full."""

    @cached_property
    def count(self) -> int:
        return needs_me_count(self.object_list)


class StateFilter(admin.SimpleListFilter):
    """By state; the first choice is the one-click list of what waits for an operator."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [(NEEDS_ME, "⚑ Needs me"), *RequestState.choices()]

    def queryset(self, request, queryset):
        value = self.value()
        if value == NEEDS_ME:
            return queryset.filter(needs_me_q())
        if value in RequestState.__members__:
            return queryset.filter(request_state=value)
        return queryset


class TemplateFilter(admin.SimpleListFilter):
    """By route template. The choices come from the (small) templates table, not from a
    DISTINCT over every movement."""

    title = "template"
    parameter_name = "template_key"

    def lookups(self, request, model_admin):
        names = dict(RouteTemplate.objects.order_by("key", "version").values_list("key", "name"))
        return [(key, f"{key} — {name}" if name else key) for key, name in names.items()]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(template_key=self.value())
        return queryset


def distinct_values(field: str) -> list:
    """The values of an indexed column of the movements table, read by hopping along its
    index (a loose index scan: one index probe per value) instead of a DISTINCT over every
    row."""
    table = connection.ops.quote_name(MovementRequest._meta.db_table)
    column = connection.ops.quote_name(MovementRequest._meta.get_field(field).column)
    sql = (
        f"WITH RECURSIVE seen(value) AS ("
        f" SELECT MIN({column}) FROM {table}"
        f" UNION ALL"
        f" SELECT (SELECT MIN({column}) FROM {table} WHERE {column} > seen.value)"
        f" FROM seen WHERE seen.value IS NOT NULL"
        f") SELECT value FROM seen WHERE value IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [row[0] for row in cursor.fetchall()]


def distinct_assets() -> list[str]:
    """The assets in the movements table (along the asset index)."""
    return distinct_values("asset")


class AssetFilter(admin.SimpleListFilter):
    title = "asset"
    parameter_name = "asset"

    def lookups(self, request, model_admin):
        return [(asset, asset) for asset in distinct_assets()]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(asset=self.value())
        return queryset


# The venue filter offers the venues of this many most recent movements (read along the
# created_at index), and whichever venue is chosen now: no DISTINCT over every row.
RECENT_FOR_VENUES = 5000


class VenueFilter(admin.SimpleListFilter):
    """Movements from or to a venue (source or destination)."""

    title = "venue"
    parameter_name = "venue"

    def lookups(self, request, model_admin):
        recent = MovementRequest.objects.order_by("-created_at").values_list(
            "source", "destination"
        )[:RECENT_FOR_VENUES]
        venues = {venue for pair in recent for venue in pair if venue}
        if self.value():
            venues.add(self.value())
        return [(venue, venue) for venue in sorted(venues)]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(Q(source=self.value()) | Q(destination=self.value()))
        return queryset


class CreatorFilter(admin.SimpleListFilter):
    """Movements created by one person or API client (those who created any)."""

    title = "created by"
    parameter_name = "creator"

    def lookups(self, request, model_admin):
        # Along the created_by index, then the few users: no semi-join over every movement.
        users = (
            get_user_model()
            .objects.filter(pk__in=distinct_values("created_by"))
            .order_by("username")
            .values_list("pk", "username")
        )
        return [(str(pk), username) for pk, username in users]

    def queryset(self, request, queryset):
        if self.value() and self.value().isdigit():
            return queryset.filter(created_by_id=int(self.value()))
        return queryset


def _day(raw: str | None):
    try:
        return parse_date(raw) if raw else None
    except ValueError:
        return None


class CreatedRangeFilter(admin.ListFilter):
    """Created between two dates (inclusive), in the site's time zone."""

    title = "created between"
    template = "admin/movements/date_range_filter.html"
    start_param, end_param = "created_from", "created_to"

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        for name in (self.start_param, self.end_param):
            if name in params:
                self.used_parameters[name] = params.pop(name)[-1]
        self.start = _day(self.used_parameters.get(self.start_param))
        self.end = _day(self.used_parameters.get(self.end_param))

    def has_output(self):
        return True

    def expected_parameters(self):
        return [self.start_param, self.end_param]

    def queryset(self, request, queryset):
        tz = timezone.get_current_timezone()
        if self.start:
            queryset = queryset.filter(created_at__gte=datetime.combine(self.start, time(), tz))
        # The last representable day has no next day: "up to the end of time" is no bound.
        if self.end and self.end < date.max:
            end = datetime.combine(self.end + timedelta(days=1), time(), tz)
            queryset = queryset.filter(created_at__lt=end)
        return queryset

    def choices(self, changelist):
        # One entry: what the template needs to render the two date inputs and keep the
        # other filters of the current view.
        others = {
            key: value
            for key, value in changelist.params.items()
            if key not in (self.start_param, self.end_param, "p")
        }
        yield {
            "start_param": self.start_param,
            "end_param": self.end_param,
            "start": self.start.isoformat() if self.start else "",
            "end": self.end.isoformat() if self.end else "",
            "others": others.items(),
            "clear_query_string": changelist.get_query_string(
                remove=[self.start_param, self.end_param]
            ),
            "active": bool(self.start or self.end),
        }

"""Filters of the movement list. A value that does not parse is a 400 naming the filter."""

from datetime import UTC, datetime

from django import forms
from django_filters import rest_framework as filters
from django_filters.fields import IsoDateTimeField

from movements.models import MovementRequest
from movements.selectors import needing_attention_q
from movements.states import RequestState


class UTCDateTimeField(IsoDateTimeField):
    """An ISO 8601 / RFC 3339 timestamp (``T`` or ``t``, ``Z`` or an offset), compared in UTC.

    Instants beyond what a UTC datetime can hold (year 9999 at -01:00) are clamped to the
    limit instead of overflowing inside the database adapter.
    """

    def to_python(self, value):
        if isinstance(value, str):
            value = value.strip().upper()
        result = super().to_python(value)
        if result is None:
            return None
        try:
            return result.astimezone(UTC)
        except OverflowError:
            limit = datetime.max if result.year == datetime.max.year else datetime.min
            return limit.replace(tzinfo=UTC)


class UTCDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UTCDateTimeField


class StrictFilterForm(forms.Form):
    """A filter given with an empty value is refused: HTML forms send empty fields, API
    clients that send ``?created_after=`` have a bug worth hearing about."""

    NOT_EMPTY = (
        "request_state",
        "created_after",
        "created_before",
        "updated_after",
        "needs_attention",
    )

    def clean(self):
        cleaned = super().clean()
        for name in self.NOT_EMPTY:
            if self.data.get(name) == "":
                self.add_error(name, "This filter may not be empty.")
        return cleaned


class MovementFilter(filters.FilterSet):
    request_state = filters.ChoiceFilter(choices=RequestState.choices())
    template = filters.CharFilter(field_name="template_key", help_text="Route template key.")
    asset = filters.CharFilter(method="filter_asset", help_text="Asset code (any case).")
    created_after = UTCDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="Created at or after (ISO 8601)."
    )
    created_before = UTCDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="Created before (ISO 8601)."
    )
    updated_after = UTCDateTimeFilter(
        field_name="updated_at",
        lookup_expr="gte",
        help_text="Changed at or after (ISO 8601); switches to cursor paging, oldest change first.",
    )
    needs_attention = filters.ChoiceFilter(
        choices=[("true", "true"), ("false", "false")],
        method="filter_needs_attention",
        help_text="true: only movements with an open, unsnoozed attention entry; false: none.",
    )

    class Meta:
        model = MovementRequest
        form = StrictFilterForm
        fields = [
            "request_state",
            "template",
            "asset",
            "created_after",
            "created_before",
            "updated_after",
            "needs_attention",
        ]

    def filter_needs_attention(self, queryset, name, value):
        wanted = MovementRequest.objects.filter(needing_attention_q()).values("pk")
        return (
            queryset.filter(pk__in=wanted) if value == "true" else queryset.exclude(pk__in=wanted)
        )

    def filter_asset(self, queryset, name, value):
        # Assets are stored upper-case (the create service normalises them).
        return queryset.filter(asset=value.upper())

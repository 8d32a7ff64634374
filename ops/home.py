"""The console's home page (in place of Django's stock index): the signed-in person's queue,
money by asset and venue, what is UNKNOWN or stuck, attention by reason, venue health, failing
webhook subscriptions and two small charts. The live part is also served alone
(``/admin/home/live/``) and the page fetches it every ``REFRESH_SECONDS``: it updates in place,
never reloads."""

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from ops import charts, console
from ops.status import MONEY_COLUMNS
from qtg.core import money

REFRESH_SECONDS = 10
# The operations part (queue, money, counts, health, charts) is for whoever may read movements:
# every figure leads to movement pages. Others (a security admin) get the pages of their role.
OPERATIONS_PERMISSION = "movements.view_movementrequest"


def _queue_rows(items: list[console.QueueItem]) -> list[dict]:
    rows = []
    for item in items:
        if item.kind == "proposal":
            page = reverse("admin:movements_overrideproposal_confirm", args=[quote(item.pk)])
            actions = [(label, page, name) for name, label in item.actions]
        else:
            page = reverse("admin:movements_movementrequest_change", args=[quote(item.pk)])
            actions = [
                (
                    label,
                    reverse("admin:movements_movementrequest_action", args=[quote(item.pk), name]),
                    name,
                )
                for name, label in item.actions
            ]
        rows.append(
            {
                "item": item,
                "page": page,
                "actions": actions,
                "amount": money.display_amount(item.amount, item.asset),
            }
        )
    return rows


def _money_rows() -> tuple[list[dict], list[dict]]:
    rows, totals = [], {}
    for row in console.money_by_venue():
        cells = []
        for key, _ in MONEY_COLUMNS:
            value = row.amounts.get(key)
            cells.append(money.display_amount(value, row.asset) if value else "—")
            if value:
                totals.setdefault(row.asset, {}).setdefault(key, 0)
                totals[row.asset][key] += value
        rows.append({"asset": row.asset, "venue": row.venue, "cells": cells})
    total_rows = [
        {
            "asset": asset,
            "cells": [
                money.display_amount(by_key[key], asset) if key in by_key else "—"
                for key, _ in MONEY_COLUMNS
            ],
        }
        for asset, by_key in sorted(totals.items())
    ]
    return rows, total_rows


def live_context(request) -> dict:
    now = timezone.now()
    money_rows, money_totals = _money_rows()
    transit_at, transit = console.stored_money_in_transit()
    return {
        "now": now,
        "queue": _queue_rows(console.my_queue(request.user, now=now)),
        "money_columns": [label for _, label in MONEY_COLUMNS],
        "money_rows": money_rows,
        "money_totals": money_totals,
        "counts": console.counts(now=now),
        "health": console.venue_health(now=now),
        "failing": console.failing_subscriptions(),
        "settled_chart": charts.bars_per_hour(
            console.settled_per_hour(now=now),
            chart_id="qtg-chart-settled",
            title="Movements completed per hour, last 24 hours",
        ),
        "transit_charts": [
            (
                asset,
                charts.bars_per_hour(
                    series,
                    chart_id=f"qtg-chart-transit-{asset}",
                    title=f"{asset} that left a venue and had not arrived, hour by hour",
                    unit=lambda value, asset=asset: money.display_amount(value, asset),
                ),
            )
            for asset, series in transit.items()
        ],
        "transit_at": transit_at,
        "ttc_chart": charts.horizontal_bars(
            console.time_to_complete(now=now),
            chart_id="qtg-chart-ttc",
            title="Mean time to complete by template, last 7 days",
            unit=charts.duration,
        ),
        "refresh_seconds": REFRESH_SECONDS,
    }


def home(request):
    """GET /admin/: the home page."""
    operations = request.user.has_perm(OPERATIONS_PERMISSION)
    context = {
        **admin.site.each_context(request),
        "title": "Operations",
        "app_list": admin.site.get_app_list(request),
        "operations": operations,
        **(live_context(request) if operations else {}),
    }
    return TemplateResponse(request, "admin/qtg/home.html", context)


def home_live(request):
    """GET /admin/home/live/: the live part of the home page, alone."""
    if not request.user.has_perm(OPERATIONS_PERMISSION):
        raise PermissionDenied
    return TemplateResponse(request, "admin/qtg/_home_live.html", live_context(request))

"""Small server-rendered SVG charts for the console's home page (no script, no CDN)."""

import html
from datetime import datetime
from decimal import Decimal

from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from qtg.core.times import console_time

WIDTH, HEIGHT, PAD = 360, 110, 18
Number = int | float | Decimal


def _n(value: float) -> str:
    """A coordinate, to a tenth of a pixel (format_html escapes its arguments to text first)."""
    return f"{value:.1f}"


def _escape(value) -> str:
    """``conditional_escape`` without its lazy-string wrapper: what is already HTML stays as
    it is, anything else is escaped to text."""
    if hasattr(value, "__html__"):
        return value.__html__()
    return html.escape(str(value))


def _html_join(template: str, rows) -> str:
    """``format_html_join("", template, rows)`` for the many small elements of a chart (a
    page holds several charts of 24 bars): the same escaping, without its per-argument
    overhead."""
    return mark_safe("".join(template.format(*map(_escape, row)) for row in rows))


def bars_per_hour(
    series: list[tuple[datetime, Number]], *, chart_id: str, title: str, unit=str
) -> str:
    """One bar per hour; each bar carries its hour and value (``data-hour``, ``data-n``: the
    value as stored, e.g. a Decimal's digits); ``unit`` writes a value for people."""
    peak = float(max((n for _, n in series), default=0)) or 1.0
    step = (WIDTH - 2 * PAD) / max(len(series), 1)
    bars = _html_join(
        '<rect x="{}" y="{}" width="{}" height="{}" fill="#2563eb" '
        'data-hour="{}" data-n="{}"><title>{}: {}</title></rect>',
        (
            (
                _n(PAD + i * step + 1),
                _n(HEIGHT - PAD - (HEIGHT - 2 * PAD) * float(n) / peak),
                _n(max(step - 2, 1)),
                _n((HEIGHT - 2 * PAD) * float(n) / peak),
                hour.strftime("%H:%M"),
                n,
                console_time(hour),
                unit(n),
            )
            for i, (hour, n) in enumerate(series)
        ),
    )
    first = series[0][0].strftime("%H:%M") if series else ""
    last = series[-1][0].strftime("%H:%M UTC") if series else ""
    return format_html(
        '<svg id="{}" class="qtg-chart" viewBox="0 0 {} {}" role="img" aria-label="{}">'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#94a3b8"/>{}'
        '<text x="{}" y="{}" font-size="10" fill="#475569">{}</text>'
        '<text x="{}" y="{}" font-size="10" fill="#475569" text-anchor="end">{}</text>'
        '<text x="{}" y="10" font-size="10" fill="#475569">peak {}</text></svg>',
        chart_id,
        WIDTH,
        HEIGHT,
        title,
        PAD,
        HEIGHT - PAD,
        WIDTH - PAD,
        HEIGHT - PAD,
        bars,
        PAD,
        HEIGHT - 4,
        first,
        WIDTH - PAD,
        HEIGHT - 4,
        last,
        PAD,
        unit(max(n for _, n in series)) if any(n for _, n in series) else 0,
    )


def horizontal_bars(rows: list[tuple[str, float]], *, chart_id: str, title: str, unit) -> str:
    """One labelled horizontal bar per row; ``unit`` formats a value for its label."""
    if not rows:
        return format_html('<p id="{}" class="qtg-quiet">Nothing to show yet.</p>', chart_id)
    peak = max((v for _, v in rows), default=0) or 1
    line = 18
    height = max(len(rows), 1) * line + 4
    label_w = 130
    bars = format_html_join(
        "",
        '<g data-key="{}" data-value="{}"><text x="0" y="{}" font-size="11" fill="#334155">{}'
        '</text><rect x="{}" y="{}" width="{}" height="12" fill="#0d9488"/>'
        '<text x="{}" y="{}" font-size="10" fill="#334155">{}</text></g>',
        (
            (
                key,
                f"{value:.0f}",
                i * line + 13,
                key,
                label_w,
                i * line + 3,
                _n((WIDTH - label_w - 60) * value / peak),
                _n(label_w + (WIDTH - label_w - 60) * value / peak + 4),
                i * line + 13,
                unit(value),
            )
            for i, (key, value) in enumerate(rows)
        ),
    )
    return format_html(
        '<svg id="{}" class="qtg-chart" viewBox="0 0 {} {}" role="img" aria-label="{}">{}</svg>',
        chart_id,
        WIDTH,
        height,
        title,
        bars,
    )


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

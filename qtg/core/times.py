"""Times as people read them in the console: one format with its zone (``qtg/formats``)."""

from datetime import datetime

from django.utils import formats, timezone


def console_time(value: datetime | None) -> str:
    """``value`` in the current time zone (UTC unless one is activated), written the way every
    console template writes a datetime: "2026-12-03 12:42:07 UTC"."""
    if value is None:
        return "—"
    return formats.date_format(timezone.localtime(value), "DATETIME_FORMAT")

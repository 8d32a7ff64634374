"""Verify the evidence chain with the audit key and against the signed checkpoints; report
every break by table, stream and row (exit status 1 if any)."""

import re
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from qtg.core.checkpoints import read_checkpoints, verify_all, verify_recent

DURATION = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(raw: str) -> datetime:
    """``10m``, ``2h``, ``1d`` (ago), or an ISO 8601 time."""
    match = DURATION.match(raw.strip())
    if match:
        return timezone.now() - timedelta(**{UNITS[match[2]]: int(match[1])})
    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError as exc:
        raise CommandError(f"--since {raw!r}: a duration (10m, 2h, 1d) or an ISO time") from exc
    return when if when.tzinfo else timezone.make_aware(when)


class Command(BaseCommand):
    help = (
        "Verify every evidence table's chain with the audit key and against the signed "
        "checkpoints: edited, re-linked, deleted or truncated rows are breaks."
    )

    def add_arguments(self, parser):
        parser.add_argument("--movement", help="Verify only this movement's events and approvals.")
        parser.add_argument(
            "--since",
            help="Only rows written since then (10m, 2h, ISO time), bounded by --limit per table, "
            "and the latest checkpoint's counts (what beat runs).",
        )
        parser.add_argument("--limit", type=int, default=None, help="Rows per table with --since.")
        parser.add_argument(
            "--checkpoints",
            help="A checkpoint file to verify against (default QTG_AUDIT_CHECKPOINT_FILE), e.g. "
            "a subscriber's copy.",
        )

    def handle(self, *args, movement=None, since=None, limit=None, checkpoints=None, **options):
        state = read_checkpoints(Path(checkpoints) if checkpoints else None)
        if movement:
            from movements.audit import movement_chain_breaks

            breaks = movement_chain_breaks(movement, checkpoints=state)
            lines = [*state.problems, *(str(b) for b in breaks)]
            rows = None
        elif since:
            result = verify_recent(
                since=parse_since(since),
                limit=limit or settings.QTG_AUDIT_VERIFY_LIMIT,
                checkpoints=state,
            )
            lines, rows = result.lines(), result.rows
        else:
            result = verify_all(checkpoints=state)
            lines, rows = result.lines(), result.rows
        for line in lines:
            self.stdout.write(f"BREAK {line}")
        against = f"checkpoint #{state.last_seq}" if state.count else "no checkpoint yet"
        if lines:
            raise CommandError(f"{len(lines)} break(s) in the audit chain (against {against})")
        counted = f"{rows} rows verified" if rows is not None else f"movement {movement} verified"
        self.stdout.write(f"audit chain intact: {counted} against {against}")

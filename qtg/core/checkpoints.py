"""Signed checkpoints of the evidence chain, kept outside the database, and the verifier that
checks the chain against them.

A checkpoint is one JSON line: its sequence number, the hash of the previous line, and per
evidence table its row count, its newest id, the newest id of its legacy rows, and for each
stream that changed since the previous checkpoint (every stream in the first one) its row
count, newest id and head link. It is signed with the audit key (``sig``, ``key_id``) and
written to three places: appended to ``QTG_AUDIT_CHECKPOINT_FILE`` (fsynced), logged
(``qtg.audit`` logger, one line), and sent as the webhook event ``audit.checkpoint`` to every
operator subscription that asks for it (``ops.audit``), so subscribers keep their own copy.

Rows deleted at the end of a stream, a stream deleted whole, and a truncated table leave no
trace in the chain itself: the folded checkpoints (the newest mark of every stream) count
them. ``docs/verify_checkpoints.py`` checks a checkpoint file with the standard library only.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max
from django.utils import timezone

from qtg.core.audit_keys import LEGACY, audit_key
from qtg.core.chain import (
    GENESIS,
    ChainBreak,
    StreamMark,
    chained_models,
    link_problem,
    orphan_break,
    orphaned_subjects,
    stream_of,
    streams_of,
    verify_stream,
)

logger = logging.getLogger("qtg.audit")
EVENT_TYPE = "audit.checkpoint"
FORMAT_VERSION = 1


def canonical(payload: dict[str, Any]) -> bytes:
    """The bytes a checkpoint's signature covers: everything but ``sig``, canonical JSON."""
    body = {k: v for k, v in payload.items() if k != "sig"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def line_hash(line: str) -> str:
    return hashlib.sha256(line.strip().encode()).hexdigest()


@dataclass
class TableMark:
    rows: int = 0
    last_id: int = 0
    legacy_through: int | None = None
    streams: dict[str, StreamMark] = field(default_factory=dict)


@dataclass
class Checkpoints:
    """A checkpoint file read and checked, folded: the newest mark of every table and stream."""

    count: int = 0
    last_seq: int = 0
    last_line_hash: str = GENESIS
    last_at: str = ""
    tables: dict[str, TableMark] = field(default_factory=dict)
    latest: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)


def checkpoint_path() -> Path:
    return Path(settings.QTG_AUDIT_CHECKPOINT_FILE)


def read_checkpoints(path: Path | None = None) -> Checkpoints:
    """Every checkpoint of ``path``, each signature and the sequence between them checked."""
    path = path or checkpoint_path()
    try:
        return parse_checkpoints(path.read_text())
    except FileNotFoundError:
        return Checkpoints()


def parse_checkpoints(text: str) -> Checkpoints:
    """``read_checkpoints`` of a file's text."""
    state = Checkpoints()
    lines = text.splitlines()
    key = audit_key()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            payload = json.loads(line)
        except ValueError:
            state.problems.append(f"checkpoint line {number}: not JSON")
            continue
        verdict = key.verify(str(payload.get("key_id")), canonical(payload), payload.get("sig"))
        if not verdict:
            why = "signed with an unknown key" if verdict is None else "its signature fails"
            state.problems.append(f"checkpoint line {number}: {why}")
            continue
        if payload.get("seq") != state.last_seq + 1 or payload.get("prev") != state.last_line_hash:
            state.problems.append(
                f"checkpoint line {number} (seq {payload.get('seq')}): does not follow the "
                f"previous checkpoint (a checkpoint was removed or reordered)"
            )
        state.count += 1
        state.last_seq = int(payload.get("seq") or 0)
        state.last_line_hash = line_hash(line)
        state.last_at = str(payload.get("at", ""))
        state.latest = payload
        for label, entry in (payload.get("tables") or {}).items():
            mark = state.tables.setdefault(label, TableMark())
            mark.rows, mark.last_id = int(entry["rows"]), int(entry["last_id"])
            if mark.legacy_through is None:
                mark.legacy_through = int(entry.get("legacy_through") or 0)
            for stream, (rows, last_id, head) in (entry.get("streams") or {}).items():
                mark.streams[stream] = StreamMark(int(rows), int(last_id), str(head))
    return state


def _table_entry(model, previous: TableMark | None) -> dict[str, Any]:
    rows = model._base_manager.order_by()
    totals = rows.aggregate(rows=Count("pk"), last_id=Max("pk"))
    legacy = rows.filter(chain_key=LEGACY).aggregate(last=Max("pk"))["last"] or 0
    stream = model.chain_stream
    changed = rows.filter(pk__gt=previous.last_id) if previous else rows
    names = changed.values_list(stream, flat=True).distinct()
    marks = (
        rows.filter(**{f"{stream}__in": names})
        .values(stream)
        .annotate(n=Count("pk"), last=Max("pk"))
        .values_list(stream, "n", "last")
    )
    marks = list(marks)
    heads = dict(rows.filter(pk__in=[m[2] for m in marks]).values_list("pk", "chain_hash"))
    return {
        "rows": totals["rows"],
        "last_id": totals["last_id"] or 0,
        "legacy_through": legacy,
        "streams": {str(name): [n, last, heads.get(last, "")] for name, n, last in marks},
    }


def checkpoint_write(*, reason: str, path: Path | None = None) -> dict[str, Any]:
    """Take and sign a checkpoint of every evidence table, append it to the file and log it;
    returns it (``ops.audit.audit_checkpoint`` also sends it to webhook subscribers)."""
    path = path or checkpoint_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as out:
        # One writer at a time (beat and a prestart may meet): each line follows the last.
        fcntl.flock(out, fcntl.LOCK_EX)
        out.seek(0)
        payload, line = _take(parse_checkpoints(out.read()), reason)
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())
    tables = payload["tables"]
    summary = {
        label: {"rows": t["rows"], "last_id": t["last_id"], "streams": len(t["streams"])}
        for label, t in tables.items()
    }
    logger.info(
        "audit checkpoint %s written",
        payload["seq"],
        extra={
            "audit_checkpoint": {
                "seq": payload["seq"],
                "sig": payload["sig"],
                "line_sha256": line_hash(line),
                "tables": summary,
            }
        },
    )
    return payload


def _take(state: Checkpoints, reason: str) -> tuple[dict[str, Any], str]:
    """The next checkpoint after ``state``, signed, and its line."""
    key = audit_key()
    with transaction.atomic():
        # Each count is of rows that existed when it was read: a row another transaction
        # commits later under a lower id only adds to it (the verifier allows more, not less).
        tables = {
            model._meta.label_lower: _table_entry(model, state.tables.get(model._meta.label_lower))
            for model in chained_models()
        }
    payload: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "seq": state.last_seq + 1,
        "prev": state.last_line_hash,
        "at": timezone.now().isoformat(),
        "reason": reason,
        "key_id": key.key_id,
        "tables": tables,
    }
    payload["sig"] = key.sign(canonical(payload))
    return payload, json.dumps(payload, sort_keys=True, separators=(",", ":"))


# --- verification ------------------------------------------------------------------------------


@dataclass
class Verification:
    rows: int = 0
    breaks: list[ChainBreak] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    checkpoint_seq: int = 0

    @property
    def ok(self) -> bool:
        return not self.breaks and not self.problems

    def lines(self) -> list[str]:
        return [*self.problems, *(str(b) for b in self.breaks)]


def verify_all(
    *, checkpoints: Checkpoints | None = None, models: Iterable | None = None
) -> Verification:
    """Every row of every evidence table, against the folded checkpoints."""
    checkpoints = checkpoints or read_checkpoints()
    result = Verification(problems=list(checkpoints.problems), checkpoint_seq=checkpoints.last_seq)
    for model in models or chained_models():
        label = model._meta.label_lower
        table = checkpoints.tables.get(label)
        marks = dict(table.streams) if table else {}
        legacy_through = table.legacy_through if table else None
        counted = 0
        for stream, rows in streams_of(model):
            result.rows += len(rows)
            if table:
                counted += sum(1 for row in rows if row.pk <= table.last_id)
            result.breaks += verify_stream(
                model, stream, rows, mark=marks.pop(stream, None), legacy_through=legacy_through
            )
        result.breaks += [orphan_break(model, subject) for subject in orphaned_subjects(model)]
        for stream, mark in marks.items():
            if mark.rows:
                result.breaks.append(
                    ChainBreak(
                        label,
                        stream,
                        None,
                        f"all {mark.rows} checkpointed row(s) are gone (the stream was deleted)",
                    )
                )
        if table and counted < table.rows:
            how = "the table was emptied (TRUNCATE?)" if counted == 0 else "rows were deleted"
            result.breaks.append(
                ChainBreak(
                    label,
                    "*",
                    None,
                    f"{table.rows - counted} of {table.rows} checkpointed row(s) missing: {how}",
                )
            )
    return result


def verify_recent(
    *,
    since: datetime | timedelta,
    limit: int,
    checkpoints: Checkpoints | None = None,
    models: Iterable | None = None,
) -> Verification:
    """The newest rows (written since ``since``, at most ``limit`` per table): their links and
    predecessors; and against the latest checkpoint: each table's count and the marks of the
    streams it names. Bounded, for beat."""
    if isinstance(since, timedelta):
        since = timezone.now() - since
    checkpoints = checkpoints or read_checkpoints()
    result = Verification(problems=list(checkpoints.problems), checkpoint_seq=checkpoints.last_seq)
    latest = (checkpoints.latest or {}).get("tables", {})
    for model in models or chained_models():
        label = model._meta.label_lower
        stream_field = model.chain_stream
        manager = model._base_manager.order_by()
        rows = list(manager.filter(**{f"{model.chain_time}__gte": since}).order_by("-pk")[:limit])
        result.rows += len(rows)
        streams = {getattr(row, stream_field) for row in rows}
        prevs = {row.chain_prev for row in rows} - {GENESIS}
        known = set()
        if prevs:
            known = set(
                manager.filter(
                    **{f"{stream_field}__in": streams}, chain_hash__in=prevs
                ).values_list(stream_field, "chain_hash")
            )
        for row in sorted(rows, key=lambda r: r.pk):
            if row.chain_key == LEGACY:
                table = checkpoints.tables.get(label)
                if table and table.legacy_through is not None and row.pk > table.legacy_through:
                    result.breaks.append(
                        ChainBreak(
                            label,
                            stream_of(row),
                            row.pk,
                            "marked legacy but written after the migration that keyed links",
                        )
                    )
                continue
            problem = link_problem(row)
            if (
                problem is None
                and row.chain_prev != GENESIS
                and (getattr(row, stream_field), row.chain_prev) not in known
            ):
                problem = "its predecessor is missing (a row of the stream was deleted)"
            if problem:
                result.breaks.append(ChainBreak(label, stream_of(row), row.pk, problem))
        entry = latest.get(label)
        if not entry:
            continue
        left = manager.filter(pk__lte=entry["last_id"]).count()
        if left < entry["rows"]:
            result.breaks.append(
                ChainBreak(
                    label,
                    "*",
                    None,
                    f"{entry['rows'] - left} of {entry['rows']} checkpointed row(s) missing"
                    + (": the table was emptied (TRUNCATE?)" if left == 0 else ""),
                )
            )
        marks = {name: StreamMark(*mark) for name, mark in entry.get("streams", {}).items()}
        if marks:
            result.breaks += _check_marks(model, marks)
    return result


def _check_marks(model, marks: dict[str, StreamMark]) -> list[ChainBreak]:
    label = model._meta.label_lower
    stream_field = model.chain_stream
    found: dict[str, list] = {}
    names = list(marks)
    for start in range(0, len(names), 500):
        chunk = names[start : start + 500]
        for stream, pk, link in (
            model._base_manager.order_by()
            .filter(**{f"{stream_field}__in": chunk})
            .values_list(stream_field, "pk", "chain_hash")
        ):
            found.setdefault(str(stream), []).append((pk, link))
    breaks = []
    for stream, mark in marks.items():
        rows = [(pk, link) for pk, link in found.get(stream, []) if pk <= mark.last_id]
        head = next((link for pk, link in rows if pk == mark.last_id), None)
        if not rows and mark.rows:
            reason = f"all {mark.rows} checkpointed row(s) are gone (the stream was deleted)"
        elif len(rows) < mark.rows:
            reason = f"{mark.rows - len(rows)} checkpointed row(s) deleted"
        elif head is None and mark.rows:
            reason = "the newest checkpointed row is gone"
        elif head is not None and head != mark.head:
            reason = "the newest checkpointed row's link differs from the checkpoint's"
        else:
            continue
        breaks.append(ChainBreak(label, stream, None, reason))
    return breaks

"""The evidence chain: every audit row of every evidence table is linked into a per-stream
chain of HMAC-SHA-256 links under a key that is not in the database (``qtg.core.audit_keys``).

A row stores ``chain_prev`` (the link of the stream's newest row when it was written, ""
for the first), ``chain_hash`` (its own link) and ``chain_key`` (the id of the key that
signed it). The link is ``HMAC(key, table | stream | chain_prev | sha256(content))``, the
content being every column of the row as stored except its id and the chain columns. So:

- an edited row no longer matches its link, and a link recomputed without the key does not
  verify (``movements.audit.chain_link``-style re-hashing is useless);
- a deleted row leaves the rows that chained to it without their predecessor;
- deleting the newest rows, a whole stream or a whole table leaves no trace in the chain
  itself: the signed checkpoints outside the database (``qtg.core.checkpoints``) count them.

Rows of one stream can be written by two transactions at once (parallel nodes): both may
chain to the same predecessor. A stream is therefore verified as a tree: every row links to
the genesis or to a row of its stream written before it. Each row can be verified alone
(``link_problem``), which is what dispatch does with approvals.

Rows written before links were keyed carry ``chain_key = "legacy"`` (set by the migrations
that added the columns, never by the application: PostgreSQL refuses such an insert and a
check constraint refuses a keyed row without a link). Legacy rows may only open a stream.

Writing costs one HMAC per row and, per batch of rows, one query for the heads of their
streams (no query per row). A caller that read the heads itself, under the lock that orders
those streams, says so with ``heads_known``: within it the rows of those streams are linked
after the heads given, then after the rows linked within it, with no query at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.apps import apps
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, models, transaction
from django.db.models import Q
from django.db.transaction import TransactionManagementError

from qtg.core.audit_keys import LEGACY, audit_key
from qtg.core.keyed import KeyColumn

GENESIS = ""
CHAIN_FIELDS = ("chain_prev", "chain_hash", "chain_key")


class ChainedQuerySet(models.QuerySet):
    """``bulk_create`` links the rows first (one heads query for all of them)."""

    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        chain_rows([obj for obj in objs if not obj.chain_hash])
        return super().bulk_create(objs, *args, **kwargs)


class ChainedModel(models.Model):
    """A row of an evidence table, linked into its stream's chain when it is inserted.

    Subclasses name ``chain_stream`` (the attname whose value names the stream, e.g.
    ``request_id``), ``chain_time`` (their timestamp field) and may name ``chain_exclude``
    (bookkeeping columns outside the content, which the database guards separately)."""

    chain_stream: str = ""
    chain_time: str = "created_at"
    chain_exclude: tuple[str, ...] = ()
    # True when ``chain_stream`` is a foreign key to a subject that is created with its first
    # row (a movement with its CREATED event): a subject with no row lost its whole stream.
    chain_subject_has_rows: bool = False

    chain_prev = models.CharField(max_length=64, blank=True, editable=False)
    chain_hash = models.CharField(max_length=64, blank=True, editable=False)
    chain_key = models.CharField(max_length=32, blank=True, editable=False)

    objects = ChainedQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self._state.adding and not self.chain_hash:
            chain_rows([self])
        super().save(*args, **kwargs)


def linked_constraint(name: str) -> models.CheckConstraint:
    """No row written after the migration lacks a link (legacy rows are the migration's)."""
    return models.CheckConstraint(
        condition=Q(chain_key=LEGACY) | (~Q(chain_key="") & ~Q(chain_hash="")),
        name=f"{name}_linked",
    )


def chained_models() -> list[type[ChainedModel]]:
    """Every evidence table of the installed apps, in a stable order."""
    found = [m for m in apps.get_models() if issubclass(m, ChainedModel)]
    return sorted(found, key=lambda m: m._meta.label_lower)


def model_by_label(label: str) -> type[ChainedModel] | None:
    return next((m for m in chained_models() if m._meta.label_lower == label), None)


def _plain(field: models.Field, value: Any) -> Any:
    """``value`` as it reads back from the database, in a canonical JSON-able form."""
    if value is None:
        return None
    if isinstance(field, models.JSONField):
        return json.loads(json.dumps(value, cls=field.encoder or DjangoJSONEncoder))
    if isinstance(field, models.DecimalField):
        return str(Decimal(str(value)).normalize())
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bool | int | str):
        return value
    return str(value)


def row_content(row: ChainedModel) -> str:
    """The row's content as canonical text (what its link covers)."""
    skip = {*CHAIN_FIELDS, *row.chain_exclude}
    content = {
        field.attname: _plain(field, field.value_from_object(row))
        for field in row._meta.concrete_fields
        if not field.primary_key and field.name not in skip
    }
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def stream_of(row: ChainedModel) -> str:
    return str(getattr(row, row.chain_stream))


def link_message(row: ChainedModel, previous: str) -> bytes:
    digest = hashlib.sha256(row_content(row).encode()).hexdigest()
    return f"{row._meta.label_lower}|{stream_of(row)}|{previous}|{digest}".encode()


# (model, str(stream)) -> (head, marker): the heads ``heads_known`` was given or that
# ``chain_rows`` linked within it. A marker is a commit hook registered when its rows were
# linked: while the connection still holds it, those rows are part of the transaction (rolling
# back a savepoint drops the hooks registered inside it, with the rows). None: a row read from
# the database, committed, which nothing this transaction does can take back.
_KNOWN_HEADS: ContextVar[dict[tuple[type, str], tuple[str, Any]] | None] = ContextVar(
    "qtg_chain_heads_known", default=None
)


class _Linked:
    """A commit hook that does nothing: its presence says its rows are still written."""

    def __call__(self) -> None:
        return None


@contextmanager
def heads_known(heads: Mapping[type, Mapping[Any, str]]) -> Iterator[None]:
    """Within the block, ``chain_rows`` links the rows of each ``{model: {stream: head}}``
    given after that head, then after the rows it linked itself within the block, without
    reading them. For a caller inside a transaction that read the heads itself while holding
    the lock that orders the streams (the movement's row lock), or that knows a stream is new
    (``GENESIS``). A head linked inside a savepoint that was rolled back is read again."""
    if not transaction.get_connection().in_atomic_block:
        raise TransactionManagementError("heads_known() needs an open transaction")
    known = dict(_KNOWN_HEADS.get() or {})
    for model, streams in heads.items():
        for stream, head in streams.items():
            known[(model, str(stream))] = (head, None)
    token = _KNOWN_HEADS.set(known)
    try:
        yield
    finally:
        _KNOWN_HEADS.reset(token)


def _still_written(marker: Any) -> bool:
    if marker is None:
        return True
    return any(hook is marker for _, hook, _ in transaction.get_connection().run_on_commit)


def chain_rows(rows: Sequence[ChainedModel]) -> None:
    """Link each unsaved row after the newest row of its stream (written before, or earlier
    in ``rows``). One query per model for the whole list, none for the streams whose heads
    are known (``heads_known``)."""
    if not rows:
        return
    key = audit_key()
    known = _KNOWN_HEADS.get()
    by_model: dict[type, list[ChainedModel]] = {}
    for row in rows:
        by_model.setdefault(type(row), []).append(row)
    for model, group in by_model.items():
        streams = {getattr(row, model.chain_stream) for row in group}
        heads: dict = {}
        for stream in streams:
            entry = known.get((model, str(stream))) if known else None
            if entry is not None and _still_written(entry[1]):
                heads[stream] = entry[0]
        if missing := streams - set(heads):
            heads.update(_heads(model, missing))
        for row in group:
            stream = getattr(row, model.chain_stream)
            row.chain_prev = heads.get(stream, GENESIS)
            row.chain_key = key.key_id
            row.chain_hash = key.sign(link_message(row, row.chain_prev))
            heads[stream] = row.chain_hash
        if known:
            marker = _Linked()
            transaction.on_commit(marker)
            for stream in streams:
                if (model, str(stream)) in known:
                    known[(model, str(stream))] = (heads[stream], marker)


def _heads(model: type[ChainedModel], streams: set) -> dict:
    """The link of each stream's newest row: one statement, written out rather than built by
    the ORM (every audit write asks it, and compiling the query cost ten times running it)."""
    meta, key = model._meta, KeyColumn(model, model.chain_stream)
    quote = connection.ops.quote_name
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    among, params = key.among(streams)
    sql = (
        f"SELECT {key.column}, {quote('chain_hash')} FROM {table} WHERE {pk} IN ("
        f"SELECT MAX({pk}) FROM {table} WHERE {among} GROUP BY {key.column})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {key.read(stream): head for stream, head in cursor.fetchall()}


def link_problem(row: ChainedModel) -> str | None:
    """Why ``row``'s own link does not hold (None: it does). Legacy rows carry no link."""
    if row.chain_key == LEGACY:
        return None
    if not row.chain_key or not row.chain_hash:
        return "it has no link"
    verdict = audit_key().verify(row.chain_key, link_message(row, row.chain_prev), row.chain_hash)
    if verdict is None:
        return f"it is signed with key {row.chain_key!r}, which this keyring does not hold"
    if not verdict:
        return (
            "its content or link does not match its signature "
            "(edited, or re-linked without the key)"
        )
    return None


@dataclass(frozen=True)
class ChainBreak:
    table: str
    stream: str
    row_id: Any
    reason: str

    def __str__(self) -> str:
        row = f" row {self.row_id}" if self.row_id is not None else ""
        return f"{self.table} stream {self.stream}{row}: {self.reason}"


@dataclass
class StreamMark:
    """What a checkpoint says of one stream: rows up to ``last_id``, and the newest's link."""

    rows: int
    last_id: int
    head: str


def verify_stream(
    model: type[ChainedModel],
    stream: str,
    rows: Iterable[ChainedModel],
    *,
    mark: StreamMark | None = None,
    legacy_through: int | None = None,
) -> list[ChainBreak]:
    """Every break in one stream's rows (in id order), against its checkpoint ``mark``."""
    label = model._meta.label_lower
    breaks: list[ChainBreak] = []
    known = {GENESIS}
    keyed_seen = False
    counted, head_seen = 0, None

    def broke(row_id: Any, reason: str) -> None:
        breaks.append(ChainBreak(label, stream, row_id, reason))

    for row in rows:
        if mark is not None and row.pk <= mark.last_id:
            counted += 1
            if row.pk == mark.last_id:
                head_seen = row.chain_hash
        if row.chain_key == LEGACY:
            if keyed_seen:
                broke(row.pk, "marked legacy after keyed rows of its stream")
            elif legacy_through is not None and row.pk > legacy_through:
                broke(row.pk, "marked legacy but written after the migration that keyed links")
            known.add(row.chain_hash)
            continue
        keyed_seen = True
        problem = link_problem(row)
        if problem:
            broke(row.pk, problem)
        elif row.chain_prev not in known:
            broke(row.pk, "its predecessor is missing (a row of the stream was deleted)")
        known.add(row.chain_hash)
    if mark is not None:
        if counted == 0 and mark.rows:
            broke(None, f"all {mark.rows} checkpointed row(s) are gone (the stream was deleted)")
        elif counted < mark.rows:
            broke(
                None,
                f"{mark.rows - counted} checkpointed row(s) deleted "
                f"({counted} of {mark.rows} left up to row {mark.last_id})",
            )
        elif head_seen is None and mark.rows:
            broke(mark.last_id, "the newest checkpointed row is gone")
        elif head_seen is not None and head_seen != mark.head:
            broke(mark.last_id, "the newest checkpointed row's link differs from the checkpoint's")
        # More rows than counted is no break: a transaction may commit a lower id late.
    return breaks


def orphaned_subjects(model: type[ChainedModel], subjects: Iterable | None = None) -> list[Any]:
    """The subjects of ``model``'s streams (among ``subjects``, else all) that have no row at
    all: their whole stream was deleted, checkpointed or not. One query."""
    if not model.chain_subject_has_rows:
        return []
    field = next(f for f in model._meta.concrete_fields if f.attname == model.chain_stream)
    rows = model._base_manager.filter(**{field.attname: models.OuterRef("pk")})
    found = field.related_model._base_manager.filter(~models.Exists(rows))
    if subjects is not None:
        found = found.filter(pk__in=list(subjects))
    return list(found.order_by("pk").values_list("pk", flat=True))


def orphan_break(model: type[ChainedModel], subject: Any) -> ChainBreak:
    field = next(f for f in model._meta.concrete_fields if f.attname == model.chain_stream)
    return ChainBreak(
        model._meta.label_lower,
        str(subject),
        None,
        f"every row of the stream is gone ({field.related_model._meta.label_lower} {subject} "
        f"exists)",
    )


def streams_of(model: type[ChainedModel], queryset=None) -> Iterator[tuple[str, list]]:
    """(stream, its rows in id order) for every stream of ``model`` (or of ``queryset``)."""
    rows = (queryset if queryset is not None else model._base_manager.all()).order_by(
        model.chain_stream, "pk"
    )
    current, bucket = None, []
    for row in rows.iterator(chunk_size=2000):
        stream = stream_of(row)
        if stream != current and bucket:
            yield current, bucket
            bucket = []
        current = stream
        bucket.append(row)
    if bucket:
        yield current, bucket

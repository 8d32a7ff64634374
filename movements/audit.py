"""The movement side of the evidence chain (qtg/core/chain.py).

Movement events are linked by the row writers (movements/services/writers.py) just before the
insert, one heads query per batch (``chain_events``). Decisions that have no event table of
their own (approval-policy versions, address-book entries, override proposals, webhook
subscriptions, exchange journal answers) are recorded as ``AuditRecord`` rows, one stream per
subject, by ``record_decision`` in the transaction of the decision.
"""

from collections.abc import Sequence
from typing import Any

from qtg.core.actors import Actor
from qtg.core.chain import chain_rows


def chain_events(events: Sequence) -> None:
    """Link each unsaved event after the newest event of its movement (one query)."""
    chain_rows(events)


def record_decision(*, subject: Any, action: str, actor: Actor | str, detail: dict | None = None):
    """Append one linked audit record of ``action`` on ``subject`` (a model instance, or a
    ``"kind:id"`` string) by ``actor``."""
    from movements.models import AuditRecord

    if not isinstance(subject, str):
        subject = f"{subject._meta.label_lower}:{subject.pk}"
    if isinstance(actor, Actor):
        actor_type, actor_id = actor.type, str(actor)
    else:
        actor_type, actor_id = "system", str(actor)
    record = AuditRecord(
        subject=subject,
        action=action,
        actor_type=actor_type,
        actor_id=actor_id[:160],
        detail=detail or {},
    )
    record.save(force_insert=True)
    return record


def movement_chain_breaks(request_id: Any, *, checkpoints=None) -> list:
    """Every break in the chains of one movement: its events and its approvals, against the
    checkpoints' marks of those streams."""
    from movements.models import MovementApproval, MovementEvent
    from qtg.core.chain import orphan_break, orphaned_subjects, verify_stream
    from qtg.core.checkpoints import read_checkpoints

    checkpoints = checkpoints or read_checkpoints()
    breaks = [
        orphan_break(MovementEvent, s) for s in orphaned_subjects(MovementEvent, [request_id])
    ]
    for model in (MovementEvent, MovementApproval):
        table = checkpoints.tables.get(model._meta.label_lower)
        stream = str(request_id)
        rows = list(model._base_manager.filter(request_id=request_id).order_by("pk"))
        breaks += verify_stream(
            model,
            stream,
            rows,
            mark=table.streams.get(stream) if table else None,
            legacy_through=table.legacy_through if table else None,
        )
    return breaks


def movement_chain_status(request_id: Any) -> str:
    """For the movement page: "verified (N events)" or "broken at event N: why"."""
    from movements.models import MovementEvent

    breaks = movement_chain_breaks(request_id)
    if not breaks:
        count = MovementEvent.objects.filter(request_id=request_id).count()
        return f"verified ({count} events, with the audit key and the checkpoints)"
    first = breaks[0]
    where = f"{first.table.split('.')[-1]} {first.row_id}" if first.row_id else first.table
    more = f" (+{len(breaks) - 1} more)" if len(breaks) > 1 else ""
    return f"broken at {where}: {first.reason}{more}"

"""Tamper evidence for the audit trail: a per-movement hash chain over its events.

Each event stores ``chain_hash = sha256(previous hash of the movement + sha256(content))``,
computed in Python by the row writers (movements/services/writers.py) just before the insert.
On PostgreSQL a trigger also refuses any UPDATE or DELETE of an event (migration 0004), so an
edit needs the database owner, and the chain shows it: ``manage.py audit_verify`` recomputes
every hash.

Events of one movement can be written by two transactions at once (parallel nodes on two
workers): both may chain to the same previous event. The chain is therefore verified as a
tree: every event must link to the genesis or to an event written before it, and its hash must
match its content. An edited event no longer matches its hash; a deleted one leaves the events
that chained to it without a predecessor.
"""

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Max

GENESIS = ""


def event_content(event) -> str:
    """The event's content as canonical text (what the hash covers)."""
    content = {
        "request": str(event.request_id),
        "node": None if event.node_id is None else str(event.node_id),
        "node_key": event.node_key,
        "kind": event.kind,
        "old_state": event.old_state,
        "new_state": event.new_state,
        "actor_type": event.actor_type,
        "actor_id": event.actor_id,
        # As stored: the column's own encoder, and a round trip through JSON.
        "detail": json.loads(json.dumps(event.detail, cls=DjangoJSONEncoder)),
        "created_at": event.created_at.astimezone(UTC).isoformat(),
    }
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def chain_link(previous: str, event) -> str:
    """The hash of ``event`` chained after ``previous``."""
    digest = hashlib.sha256(event_content(event).encode()).hexdigest()
    return hashlib.sha256(f"{previous}:{digest}".encode()).hexdigest()


def chain_events(events: Sequence) -> None:
    """Give each unsaved event its chain hash, in order: each chains to the newest event of its
    movement (written before, or earlier in ``events``). One query for the whole list."""
    if not events:
        return
    from movements.models import MovementEvent

    request_ids = {event.request_id for event in events}
    heads: dict = dict.fromkeys(request_ids, GENESIS)
    newest_ids = (
        MovementEvent.objects.filter(request_id__in=request_ids)
        .values("request_id")
        .annotate(newest=Max("id"))
        .values("newest")
    )
    heads.update(
        MovementEvent.objects.filter(id__in=newest_ids).values_list("request_id", "chain_hash")
    )
    for event in events:
        event.chain_hash = chain_link(heads[event.request_id], event)
        heads[event.request_id] = event.chain_hash


@dataclass(frozen=True)
class ChainBreak:
    request_id: object
    event_id: int
    reason: str


def verify_chain(events: Iterable) -> list[ChainBreak]:
    """Every break in the chains of ``events`` (ordered by movement, then id)."""
    breaks: list[ChainBreak] = []
    current = None
    known: set[str] = set()
    unchained = True  # events written before the chain existed carry no hash
    for event in events:
        if event.request_id != current:
            current, known, unchained = event.request_id, {GENESIS}, True
        if not event.chain_hash:
            if not unchained:
                breaks.append(ChainBreak(event.request_id, event.pk, "hash removed"))
            continue
        unchained = False
        if not any(chain_link(previous, event) == event.chain_hash for previous in known):
            breaks.append(
                ChainBreak(
                    event.request_id,
                    event.pk,
                    "content changed, or an earlier event of the chain was removed",
                )
            )
        known.add(event.chain_hash)
    return breaks

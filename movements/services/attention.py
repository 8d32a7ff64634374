"""Attention: what an operator must look at, raised once and handled by a person.

A node SUBMITTED, OBSERVING or UNKNOWN for longer than its executor expects (a deposit that
never arrives, a venue that keeps failing) is not a failure anybody may conclude by itself:
money may be in flight. Instead the movement *needs attention*: it shows in the console's
"Needs me" with the reason, one ``request_attention`` callback is sent, and the API lists the
open entries. A supervisor snoozes it (with a reason, until a time), resolves it (with a
note), or stops watching the node (the observe node goes FAILED with that evidence, and the
movement reaches MANUAL_INTERVENTION and its rescue paths).
"""

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from movements import ports
from movements.executors import get_executor
from movements.models import (
    AttentionReason,
    MovementAttention,
    MovementRequest,
    MovementRequestNode,
)
from movements.policies import attention_refusal, stop_watching_refusal
from movements.selectors import open_attention_keys
from movements.services.guards import lock_request, require_reason
from movements.services.progress import apply_request_state_from_nodes, current_nodes
from movements.services.state import record_event, set_node_state, set_request_state
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import InvalidInput
from qtg.core.policies import enforce

# Nodes that wait on the outside world: how long is "too long" is the executor's to say.
WATCHED_NODE_STATES = (NodeState.SUBMITTED, NodeState.OBSERVING, NodeState.UNKNOWN)
WATCHED_REQUEST_STATES = (
    RequestState.EXECUTING,
    RequestState.WAITING_MANUAL_ACTION,
    RequestState.MANUAL_INTERVENTION,
)


def stuck_after(executor: str) -> timedelta:
    """How long a node of ``executor`` may wait before it is stuck: the executor's own
    ``stuck_after_seconds``, else ``QTG_STUCK_AFTER_SECONDS``."""
    try:
        seconds = get_executor(executor).stuck_after_seconds
    except LookupError:
        seconds = None
    return timedelta(seconds=seconds or settings.QTG_STUCK_AFTER_SECONDS)


def attention_raise(
    *,
    request: MovementRequest,
    node: MovementRequestNode | None,
    reason: str,
    message: str,
    since: datetime,
    actor: Actor,
    evidence: dict[str, Any] | None = None,
    writer: Any = None,
) -> MovementAttention | None:
    """Raise an entry unless one is already open for this node and reason (snoozed or not):
    then nothing is written and None is returned. The caller holds the request's lock."""
    if (
        node is not None
        and MovementAttention.objects.filter(
            node=node, reason=reason, resolved_at__isnull=True
        ).exists()
    ):
        return None
    attention = MovementAttention.objects.create(
        request=request,
        node=node,
        node_key=node.node_key if node is not None else "",
        reason=reason,
        message=message,
        evidence=evidence or {},
        since=since,
    )
    # A caller showing the movement from the rows it holds reads its attention now
    # (``selectors.rows_held``).
    request.has_open_attention = True
    detail = {"attention": reason, "message": message, "since": since.isoformat()}
    record_event(
        request=request,
        node=node,
        actor=actor,
        detail={**detail, **(evidence or {})},
        writer=writer,
    )
    ports.callbacks().enqueue(
        request=request,
        event_type="request_attention",
        data={**detail, "node_key": attention.node_key},
    )
    ports.notify(
        kind="attention",
        request=request,
        actor=actor,
        detail={"reason": reason, "message": message, "node_key": attention.node_key},
    )
    if node is not None:
        # The same, told as what it is: one node needs attention.
        ports.callbacks().enqueue(
            request=request,
            event_type="node_attention",
            data={**detail, "node_key": attention.node_key},
        )
        if node.node_state == NodeState.UNKNOWN and node.has_side_effect:
            # A person is asked about a side effect in doubt: it is no longer one recovery
            # settles by itself (``progress.recovering_nodes``).
            apply_request_state_from_nodes(request, actor=actor, writer=writer)
    return attention


def detect_stuck_nodes(*, now: datetime | None = None, actor: Actor | None = None) -> int:
    """Raise attention for every watched node waiting longer than its executor expects (once;
    after an entry was resolved, the wait counts again from the resolution). Returns how
    many entries were raised."""
    now = now or timezone.now()
    actor = actor or Actor.sweep("stuck-detector")
    candidates = (
        MovementRequestNode.objects.current()
        .filter(
            node_state__in=WATCHED_NODE_STATES,
            request__request_state__in=WATCHED_REQUEST_STATES,
        )
        .exclude(attentions__reason=AttentionReason.STUCK, attentions__resolved_at__isnull=True)
        .annotate(
            last_resolved=Max(
                "attentions__resolved_at", filter=Q(attentions__reason=AttentionReason.STUCK)
            )
        )
        .values_list("pk", "request_id", "executor", "state_changed_at", "last_resolved")
    )
    thresholds: dict[str, timedelta] = {}
    raised = 0
    for node_pk, request_pk, executor, entered, last_resolved in candidates:
        if executor not in thresholds:
            thresholds[executor] = stuck_after(executor)
        since = max(entered, last_resolved) if last_resolved else entered
        if now - since < thresholds[executor]:
            continue
        with transaction.atomic():
            request = MovementRequest.objects.select_for_update(no_key=True).get(pk=request_pk)
            node = MovementRequestNode.objects.get(pk=node_pk)
            if node.node_state not in WATCHED_NODE_STATES or not node.is_current:
                continue
            node.request = request
            waited = int((now - since).total_seconds())
            attention = attention_raise(
                request=request,
                node=node,
                reason=AttentionReason.STUCK,
                message=(
                    f"{node.node_key} has been {node.node_state} for {waited} s, longer than "
                    f"the {int(thresholds[executor].total_seconds())} s {executor} is "
                    f"expected to take"
                ),
                since=since,
                actor=actor,
                evidence={
                    "node_state": node.node_state,
                    "executor": executor,
                    "stuck_after_seconds": thresholds[executor].total_seconds(),
                    "last_error": node.last_error[:500],
                },
            )
            raised += attention is not None
    return raised


def _handle_open_entries(
    request: MovementRequest,
    node_key: str,
    actor: Actor,
    changes: dict[str, Any],
    *,
    event: str,
    detail: dict[str, Any],
) -> None:
    """Apply ``changes`` to the node's open entries, each audited as ``event`` (naming the
    entry's reason) with ``detail``."""
    entries = request.attentions.select_for_update(no_key=True).filter(
        node_key=node_key, resolved_at__isnull=True
    )
    for attention in entries:
        for name, value in {**changes, "handled_by": str(actor)}.items():
            setattr(attention, name, value)
        attention.save(update_fields=[*changes, "handled_by"])
        record_event(
            request=request,
            node=attention.node,
            actor=actor,
            detail={event: attention.reason, **detail},
        )


@transaction.atomic
def attention_snooze(
    *, request: MovementRequest | Any, node_key: str, until: datetime, reason: str, actor: Actor
) -> MovementRequest:
    """Nobody is asked about the node's open entries until ``until`` (a reason is recorded)."""
    reason = require_reason(reason, "snooze")
    if until is None or until <= timezone.now():
        raise InvalidInput("snooze until a time in the future", details={"until": ["past"]})
    request = lock_request(request)
    enforce(
        attention_refusal(
            actor=actor,
            movement=request,
            open_attention_keys=open_attention_keys(request),
            node_key=node_key,
        )
    )
    _handle_open_entries(
        request,
        node_key,
        actor,
        {"snoozed_until": until, "snooze_reason": reason},
        event="attention_snoozed",
        detail={"until": until.isoformat(), "reason": reason},
    )
    return request


@transaction.atomic
def attention_resolve(
    *, request: MovementRequest | Any, node_key: str, note: str, actor: Actor
) -> MovementRequest:
    """Close the node's open entries with a note; a node still waiting is stuck again only
    after another full wait from now."""
    note = require_reason(note, "resolve")
    request = lock_request(request)
    enforce(
        attention_refusal(
            actor=actor,
            movement=request,
            open_attention_keys=open_attention_keys(request),
            node_key=node_key,
        )
    )
    _handle_open_entries(
        request,
        node_key,
        actor,
        {"resolved_at": timezone.now(), "resolution": note},
        event="attention_resolved",
        detail={"note": note},
    )
    return request


@transaction.atomic
def attention_stop_watching(
    *, request: MovementRequest | Any, node_key: str, reason: str, actor: Actor
) -> MovementRequest:
    """Give up waiting on an observe node: it goes FAILED with the operator's evidence, its
    open entries are resolved, and the movement is derived again (MANUAL_INTERVENTION when a
    side effect completed, where the rescue paths are)."""
    reason = require_reason(reason, "stop watching")
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(stop_watching_refusal(actor=actor, movement=request, nodes=nodes, node_key=node_key))
    node = next(n for n in nodes if n.node_key == node_key)
    node.lease_owner, node.lease_expires_at = "", None
    node.last_error = f"stopped watching: {reason}"
    set_node_state(
        node=node,
        new_state=NodeState.FAILED,
        actor=actor,
        detail={"resolution": "stopped watching", "reason": reason},
        update_fields=["lease_owner", "lease_expires_at", "last_error"],
    )
    _handle_open_entries(
        request,
        node_key,
        actor,
        {"resolved_at": timezone.now(), "resolution": f"stopped watching: {reason}"},
        event="attention_resolved",
        detail={"note": f"stopped watching: {reason}"},
    )
    apply_request_state_from_nodes(request, actor=actor, nodes=nodes, detail={"reason": reason})
    return request


@transaction.atomic
def node_conclusion_contradicted(
    *, node_id: int, reason: str, message: str, evidence: dict[str, Any], actor: Actor
) -> str:
    """A venue's later fact contradicts a node already concluded (FAILED, and its transaction
    is then mined): an operator is asked (once per node and reason) and a movement still
    EXECUTING goes to MANUAL_INTERVENTION through the table (its reservation stays HELD). A
    movement already terminal keeps its state (the spec's table has no edge out of FAILED):
    the attention and its evidence are what remain. Returns the movement's state."""
    node = MovementRequestNode.objects.get(pk=node_id)
    request = lock_request(node.request_id)
    node.request = request
    attention_raise(
        request=request,
        node=node,
        reason=reason,
        message=message,
        since=timezone.now(),
        actor=actor,
        evidence=evidence,
    )
    if request.request_state == RequestState.EXECUTING:
        set_request_state(
            request,
            RequestState.MANUAL_INTERVENTION,
            actor=actor,
            detail={"reason": message, "node_key": node.node_key, "evidence": evidence},
            nodes=current_nodes(request, lock=True),
        )
    return request.request_state

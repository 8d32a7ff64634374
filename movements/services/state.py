"""The only writers of state. Each transition is validated against the tables, applied through
the generated django-fsm-2 method, saved, and audited by one MovementEvent in the same
transaction. An illegal transition raises and writes nothing."""

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition

from movements.actors import Actor, resolve_actor
from movements.exceptions import IllegalStateTransition, StaleState
from movements.fsm import transition_method_name
from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.services.effects import after_request_transition
from movements.states import (
    NodeState,
    RequestState,
    can_transition_node_state,
    can_transition_request_state,
)


def record_event(
    *,
    request: MovementRequest,
    actor: Actor,
    node: MovementRequestNode | None = None,
    kind: str = MovementEvent.Kind.RECORD,
    old_state: str = "",
    new_state: str = "",
    detail: dict[str, Any] | None = None,
) -> MovementEvent:
    """Append one audit record (evidence without a state change, unless a transition wrote it)."""
    return MovementEvent.objects.create(
        request=request,
        node=node,
        node_key=node.node_key if node is not None else "",
        kind=kind,
        old_state=old_state,
        new_state=new_state,
        actor_type=actor.type,
        actor_id=actor.id,
        detail=detail or {},
    )


def _save(instance: Any, fields: list[str]) -> None:
    try:
        instance.save(update_fields=fields)
    except ConcurrentTransition:
        # django-fsm-2 found the row's state changed since we read it: another writer won.
        # The enclosing transaction is marked for rollback, so nothing of this change lands.
        raise StaleState(f"{instance} was changed by someone else; reload and try again") from None


def set_node_state(
    node: MovementRequestNode,
    new_state: NodeState | str,
    *,
    actor: Actor | None = None,
    actor_type: str | None = None,
    actor_id: str | None = None,
    detail: dict[str, Any] | None = None,
    update_fields: Iterable[str] = (),
) -> MovementEvent:
    """Move one node along an edge of NODE_TRANSITIONS and audit it.

    The caller holds the node's row lock; ``update_fields`` names other fields it changed on
    the instance that must be saved with the state. The actor is an ``Actor`` or the spec's
    ``actor_type``/``actor_id`` pair.
    """
    actor = resolve_actor(actor, actor_type, actor_id)
    old_state = node.node_state
    try:
        target = NodeState(new_state)
    except ValueError:
        target = None
    if target is None or not can_transition_node_state(old_state, target):
        raise IllegalStateTransition(
            subject=f"node {node.node_key}", current=old_state, target=str(new_state)
        )
    # Validated before the transaction opens, so a refusal never poisons the caller's.
    with transaction.atomic(savepoint=False):
        getattr(node, transition_method_name(target))()
        node.state_changed_at = timezone.now()
        _save(node, ["node_state", "state_changed_at", "updated_at", *update_fields])
        return record_event(
            request=node.request,
            node=node,
            actor=actor,
            kind=MovementEvent.Kind.TRANSITION,
            old_state=old_state,
            new_state=target,
            detail=detail,
        )


def set_request_state(
    request: MovementRequest,
    new_state: RequestState | str,
    *,
    actor: Actor | None = None,
    actor_type: str | None = None,
    actor_id: str | None = None,
    detail: dict[str, Any] | None = None,
    nodes: list[MovementRequestNode] | None = None,
    update_fields: Iterable[str] = (),
) -> MovementEvent:
    """Move a request along an edge of REQUEST_TRANSITIONS, audit it and apply the
    post-transition table (reservation effect, callback, frontier cleared on COMPLETED).

    The caller holds the request's row lock.
    """
    actor = resolve_actor(actor, actor_type, actor_id)
    old_state = request.request_state
    try:
        target = RequestState(new_state)
    except ValueError:
        target = None
    if target is None or not can_transition_request_state(old_state, target):
        raise IllegalStateTransition(subject="request", current=old_state, target=str(new_state))
    with transaction.atomic(savepoint=False):
        getattr(request, transition_method_name(target))()
        fields = ["request_state", "state_changed_at", "updated_at", *update_fields]
        request.state_changed_at = timezone.now()
        if target == RequestState.COMPLETED:
            request.current_frontier = []
            fields.append("current_frontier")
        _save(request, list(dict.fromkeys(fields)))
        event = record_event(
            request=request,
            actor=actor,
            kind=MovementEvent.Kind.TRANSITION,
            old_state=old_state,
            new_state=target,
            detail=detail,
        )
        if nodes is None:
            nodes = list(MovementRequestNode.objects.current().filter(request=request))
        after_request_transition(
            request=request, old_state=old_state, new_state=target, nodes=nodes, actor=actor
        )
        return event

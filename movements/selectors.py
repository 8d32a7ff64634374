"""Reads that are more than a one-liner: services, entry points and the apps beside movements
(through ``movements.public``) read here; nothing here writes."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db.models import (
    CharField,
    Exists,
    Max,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.utils import timezone

from movements.models import (
    MovementApproval,
    MovementAttention,
    MovementEvent,
    MovementRequest,
    MovementRequestNode,
)
from qtg.core.compiled import Compiled

VIEW_ALL_PERMISSIONS = ("movements.view_movementrequest", "movements.change_movementrequest")


def with_decision_facts(queryset: QuerySet) -> QuerySet:
    """Movements with what the policies decide their actions on, for a whole list in three
    queries: each one's live nodes (``live_nodes``), open attention (``open_attentions_list``)
    and valid approvals (``valid_approvals_list``)."""
    return queryset.prefetch_related(
        Prefetch(
            "nodes",
            queryset=MovementRequestNode.objects.current().order_by("pk"),
            to_attr="live_nodes",
        ),
        Prefetch(
            "attentions",
            queryset=MovementAttention.objects.filter(resolved_at__isnull=True),
            to_attr="open_attentions_list",
        ),
        Prefetch(
            "approvals",
            queryset=MovementApproval.objects.filter(void_at__isnull=True),
            to_attr="valid_approvals_list",
        ),
    )


def current_nodes(
    request: MovementRequest, *, lock: bool = False, writer: Any = None
) -> list[MovementRequestNode]:
    """The live attempt of every node of a request, in plan order; with a batch ``writer``
    (``state.batch()``), after what it holds is written, so the read sees it."""
    if writer is not None:
        writer.flush()
    return _CURRENT_NODES(lock, request=request.pk)


def _current_nodes(lock: bool, *, request: Any) -> QuerySet:
    qs = MovementRequestNode.objects.current().filter(request=request).select_related("plan_node")
    if lock:
        qs = qs.select_for_update(of=("self",), no_key=True)
    return qs.order_by("plan_node__position", "pk")


_CURRENT_NODES = Compiled(_current_nodes, request=MovementRequestNode._meta.get_field("request"))


def successor_keys(request: MovementRequest, node_key: str) -> list[str]:
    """Keys of the nodes the plan reaches from ``node_key`` along on_success edges."""
    return list(
        request.plan_edges.filter(source__key=node_key)
        .order_by("target__position")
        .values_list("target__key", flat=True)
    )


def predecessor_map(request: MovementRequest) -> dict[str, list[str]]:
    """For each node key of the plan, the keys of its predecessors."""
    preds: dict[str, list[str]] = {
        key: [] for key in request.plan_nodes.values_list("key", flat=True)
    }
    for source, target in request.plan_edges.values_list("source__key", "target__key"):
        preds[target].append(source)
    return preds


def request_events(request: MovementRequest) -> QuerySet[MovementEvent]:
    """The audit trail of a request, oldest first."""
    return request.events.order_by("created_at", "id")


def open_attentions(request: MovementRequest, *, now: datetime | None = None) -> list:
    """The entries that need someone now (open and not snoozed), oldest first."""
    now = now or timezone.now()
    return list(
        request.attentions.filter(resolved_at__isnull=True)
        .filter(Q(snoozed_until__isnull=True) | Q(snoozed_until__lte=now))
        .order_by("since", "id")
    )


def needing_attention_q(now: datetime | None = None) -> Q:
    """Movements with at least one entry that needs someone now (for list filters)."""
    now = now or timezone.now()
    return Q(
        Exists(
            MovementAttention.objects.filter(
                request_id=OuterRef("pk"), resolved_at__isnull=True
            ).filter(Q(snoozed_until__isnull=True) | Q(snoozed_until__lte=now))
        )
    )


def movements_with_details() -> QuerySet[MovementRequest]:
    """Movements with what their API representation reads: users, current nodes, reservation."""
    qs = MovementRequest.objects.select_related(
        "created_by", "approved_by", "withdrawn_by"
    ).prefetch_related(
        Prefetch(
            "nodes",
            queryset=MovementRequestNode.objects.current().order_by("plan_node__position", "pk"),
            to_attr="current_nodes_list",
        ),
        Prefetch(
            "attentions",
            queryset=MovementAttention.objects.filter(resolved_at__isnull=True).order_by(
                "since", "pk"
            ),
            to_attr="open_attentions_list",
        ),
        Prefetch(
            "approvals",
            queryset=MovementApproval.objects.filter(void_at__isnull=True)
            .select_related("approved_by")
            .order_by("approved_at", "pk"),
            to_attr="valid_approvals_list",
        ),
    )
    return qs.select_related("reservation")


def movements_visible_to(user) -> QuerySet[MovementRequest]:
    """Everything for holders of the admin's view (or change) permission; otherwise the
    movements the client created itself."""
    qs = movements_with_details()
    if any(user.has_perm(perm) for perm in VIEW_ALL_PERMISSIONS):
        return qs
    return qs.filter(created_by=user)


def movement_visible_to(user: Any, movement: MovementRequest) -> bool:
    """Whether ``user`` may see ``movement`` (the rule of ``movements_visible_to``)."""
    if user is None or not user.is_active:
        return False
    if movement.created_by_id == user.pk:
        return True
    return any(user.has_perm(perm) for perm in VIEW_ALL_PERMISSIONS)


def valid_approvals(movement: MovementRequest) -> list[Any]:
    """The approvals of the movement that still count (not void); a list page prefetches
    them as ``valid_approvals_list``."""
    prefetched = getattr(movement, "valid_approvals_list", None)
    if prefetched is not None:
        return list(prefetched)
    return list(movement.approvals.filter(void_at__isnull=True))


def actor_groups(actor: Any) -> list[str]:
    """The names of the groups the acting user belongs to (none for a system actor)."""
    if actor.user is None:
        return []
    return sorted(actor.user.groups.values_list("name", flat=True))


def actor_authority(actor: Any) -> list[str]:
    """``actor_groups``, read in one query with the user's permissions (its own and its
    groups'), which the permission checks that follow are then answered from: Django's
    ModelBackend keeps a user's permissions in ``_perm_cache`` once read, and this fills it
    with exactly what ``ModelBackend.get_all_permissions`` reads (an inactive user's stays
    empty, as there)."""
    user = actor.user
    if user is None:
        return []
    found: dict[str, set[str]] = {"permission": set(), "group": set()}
    for kind, first, second in _AUTHORITY(user=user.pk):
        found[kind].add(f"{first}.{second}" if kind == "permission" else first)
    if not hasattr(user, "_perm_cache") and user.is_active and not user.is_anonymous:
        user._perm_cache = found["permission"]
    return sorted(found["group"])


def _authority(*, user: Any) -> QuerySet:
    text = CharField()
    permissions = (
        Permission.objects.filter(Q(user=user) | Q(group__user=user))
        .order_by()
        .values_list(Value("permission", output_field=text), "content_type__app_label", "codename")
    )
    groups = (
        Group.objects.filter(user=user)
        .order_by()
        .values_list(Value("group", output_field=text), "name", Value("", output_field=text))
    )
    return permissions.union(groups, all=True)


_AUTHORITY = Compiled(_authority, user=lambda: get_user_model()._meta.pk)


def audit_head(request_field: str) -> Subquery:
    """The link of the newest audit event of the movement the outer query's ``request_field``
    names (None without one): what the events a service appends under the movement's lock
    chain to (``qtg.core.chain.heads_known``)."""
    newest = (
        MovementEvent.objects.filter(request_id=OuterRef(OuterRef(request_field)))
        .order_by()
        .values("request_id")
        .annotate(newest=Max("pk"))
        .values("newest")
    )
    return Subquery(MovementEvent.objects.filter(pk=Subquery(newest)).values("chain_hash"))


def _for_decision(lock: bool, *, pk: Any):
    open_attention = MovementAttention.objects.filter(
        request_id=OuterRef("pk"), resolved_at__isnull=True
    )
    qs = MovementRequest.objects.select_related(
        "created_by", "reservation", "approval_policy"
    ).annotate(
        event_head=audit_head("pk"),
        has_open_attention=Exists(open_attention),
    )
    if lock:
        qs = qs.select_for_update(of=("self",), no_key=True)
    return qs.filter(pk=pk)


_FOR_DECISION = Compiled(_for_decision, pk=MovementRequest._meta.pk)


def movement_for_decision(pk: Any, *, lock: bool = True) -> MovementRequest:
    """The movement read once for an operator's decision, under its row lock: with its
    creator, reservation and approval policy, whether it has open attention (``has_open_
    attention``), and the link of its newest audit event (``event_head``, None without one)
    for the events the decision appends (``qtg.core.chain.heads_known``). Compiled once
    (``qtg.core.compiled``): every approve and reject sends it."""
    found = _FOR_DECISION(lock, pk=pk)
    if not found:
        raise MovementRequest.DoesNotExist(f"movement {pk} does not exist")
    return found[0]


def reservation_known(movement: MovementRequest, reservation: Any) -> None:
    """Say what ``movement.reservation`` is (None: it has none yet) without reading it: its
    service just held it, or knows a movement it creates has none."""
    MovementRequest.reservation.related.set_cached_value(movement, reservation)


DETAILS_HELD = "details_held"
_DETAIL_LISTS = ("current_nodes_list", "valid_approvals_list", "open_attentions_list")


@contextmanager
def details_held(
    movement: MovementRequest,
    *,
    nodes: list[MovementRequestNode],
    approvals: list[Any],
    attentions: list[MovementAttention],
) -> Iterator[None]:
    """Within the block, ``movement`` carries everything its API representation reads, as
    its service holds it: the callback events it causes show it from these, without reading
    it again (``movements.public.movement_payloads``). The service keeps them true: ``nodes``
    are the instances it changes, ``approvals`` the list it adds the valid approvals to
    (oldest first), ``attentions`` the open ones; its creator, approver and reservation are
    loaded (``movement_for_decision``)."""
    movement.current_nodes_list = nodes
    movement.valid_approvals_list = approvals
    movement.open_attentions_list = attentions
    setattr(movement, DETAILS_HELD, True)
    try:
        yield
    finally:
        for name in (*_DETAIL_LISTS, DETAILS_HELD):
            movement.__dict__.pop(name, None)


ROWS_HELD = "rows_held"


def with_rows_for_payload(queryset: QuerySet) -> QuerySet:
    """Movements read (and locked, by the caller) with what ``rows_held`` needs: the users
    their representation names, and whether they have open attention."""
    open_attention = MovementAttention.objects.filter(
        request_id=OuterRef("pk"), resolved_at__isnull=True
    )
    return queryset.select_related("created_by", "approved_by", "withdrawn_by").annotate(
        has_open_attention=Exists(open_attention)
    )


@contextmanager
def rows_held(nodes: dict[Any, list[MovementRequestNode]]) -> Iterator[None]:
    """Within the block, each movement of ``nodes`` (the movement of each node, read with
    ``with_rows_for_payload`` and locked) is shown from its row and the current nodes its
    service holds and changes (in plan order): the callback events it causes read only its
    valid approvals, its reservation and, where it has any, its open attention
    (``movements.public.movement_payloads``). ``attention_raise`` marks a movement it raises
    an entry on as having open attention."""
    movements = [held[0].request for held in nodes.values() if held]
    for movement in movements:
        movement.current_nodes_list = nodes[movement.pk]
        setattr(movement, ROWS_HELD, True)
    try:
        yield
    finally:
        for movement in movements:
            for name in ("current_nodes_list", ROWS_HELD):
                movement.__dict__.pop(name, None)


def _valid_approvals(*, requests: list[Any]) -> QuerySet:
    return (
        MovementApproval.objects.filter(request_id__in=requests, void_at__isnull=True)
        .select_related("approved_by")
        .order_by("approved_at", "pk")
    )


def _reservations(*, requests: list[Any]) -> QuerySet:
    # The reservations app's model, reached through the relation (movements never imports it).
    return MovementRequest.reservation.related.related_model.objects.filter(request_id__in=requests)


def _open_attentions(*, requests: list[Any]) -> QuerySet:
    return MovementAttention.objects.filter(
        request_id__in=requests, resolved_at__isnull=True
    ).order_by("since", "pk")


# Every worker's result transaction sends them, for its callback events (``qtg.core.compiled``).
_VALID_APPROVALS = Compiled(_valid_approvals, requests=MovementRequest._meta.pk)
_RESERVATIONS = Compiled(_reservations, requests=MovementRequest._meta.pk)
_OPEN_ATTENTIONS = Compiled(_open_attentions, requests=MovementRequest._meta.pk)


def payload_details_read(movements: list[MovementRequest]) -> None:
    """For movements whose rows are held (``rows_held``): read what may have changed beside
    them, for all of them together: valid approvals (oldest first), reservation, and open
    attention where they have any. ``payload_details_dropped`` forgets them again."""
    ids = [movement.pk for movement in movements]
    approvals: dict[Any, list] = {pk: [] for pk in ids}
    for approval in _VALID_APPROVALS(requests=ids):
        approvals[approval.request_id].append(approval)
    reservations = {r.request_id: r for r in _RESERVATIONS(requests=ids)}
    attentions: dict[Any, list] = {pk: [] for pk in ids}
    if watched := [m.pk for m in movements if getattr(m, "has_open_attention", True)]:
        for entry in _OPEN_ATTENTIONS(requests=watched):
            attentions[entry.request_id].append(entry)
    for movement in movements:
        movement.valid_approvals_list = approvals[movement.pk]
        movement.open_attentions_list = attentions[movement.pk]
        reservation_known(movement, reservations.get(movement.pk))


def payload_details_dropped(movements: list[MovementRequest]) -> None:
    """Forget what ``payload_details_read`` read (a later event reads it again)."""
    for movement in movements:
        for name in ("valid_approvals_list", "open_attentions_list"):
            movement.__dict__.pop(name, None)
        MovementRequest.reservation.related.delete_cached_value(movement)


def unresolved_attentions(movement: MovementRequest) -> list[MovementAttention]:
    """The open (unresolved) attention entries of the movement, snoozed or not, oldest first
    (what its representation reads: ``movements_with_details``)."""
    return list(
        MovementAttention.objects.filter(request=movement, resolved_at__isnull=True).order_by(
            "since", "pk"
        )
    )


def open_attention_keys(movement: MovementRequest) -> list[str]:
    """The node key of each open (unresolved) attention entry of the movement; a list page
    prefetches them as ``open_attentions_list``."""
    prefetched = getattr(movement, "open_attentions_list", None)
    if prefetched is not None:
        return [entry.node_key for entry in prefetched]
    return list(
        movement.attentions.filter(resolved_at__isnull=True).values_list("node_key", flat=True)
    )


def permission_holders(permissions: list[str]) -> dict[str, list[str]]:
    """For each permission ("app_label.codename"), the groups that hold it, by name (one
    query): who may take an action, as the movement page says."""
    wanted = {tuple(name.split(".", 1)) for name in permissions}
    rows = (
        Group.objects.filter(permissions__codename__in=[codename for _, codename in wanted])
        .values_list("permissions__content_type__app_label", "permissions__codename", "name")
        .order_by("name")
    )
    holders: dict[str, list[str]] = {name: [] for name in permissions}
    for app_label, codename, group in rows:
        key = f"{app_label}.{codename}"
        if key in holders:
            holders[key].append(group)
    return holders

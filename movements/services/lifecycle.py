"""The request lifecycle: create, approve, reject, expire, cancel, resume a manual gate,
resolve an UNKNOWN node, and the operator's ways out of MANUAL_INTERVENTION.

Every service takes keyword-only arguments and the acting user or system component, locks the
rows it changes, asks the action's policy (``movements.policies``: the permission, four-eyes,
the state preconditions) and raises its refusal, and changes state only through
``set_request_state`` / ``set_node_state``. The permission is asked first, before the movement
is read, so a caller without it learns nothing about the movement.
"""

import hashlib
import json
from datetime import datetime, timedelta
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from movements import ports
from movements.compiler import CompiledPlan, compile_plan
from movements.executors import get_executor
from movements.executors.base import AmountRefused, DeterministicError, NodeSpec
from movements.models import (
    OPERATOR_DETAIL,
    MovementApproval,
    MovementEvent,
    MovementPlanEdge,
    MovementPlanNode,
    MovementRequest,
    MovementRequestNode,
    OverrideAction,
    OverrideProposal,
)
from movements.policies import (
    Action,
    approve_refusal,
    cancel_refusal,
    distinct_approvers,
    expire_refusal,
    force_complete_refusal,
    force_fail_refusal,
    funds_in_transit,
    intervention_resume_refusal,
    permission_refusal,
    quorum_met,
    reject_refusal,
    resolve_outcome_refusal,
    resolve_unknown_refusal,
    resume_gate_refusal,
    retry_refusal,
    two_person_refusal,
    valid_approvals,
    waiting_gates,
    withdraw_refusal,
)
from movements.selectors import current_nodes
from movements.services.address_book import Standing, standing_message, standing_of
from movements.services.approvals import (
    apply_approval_policy,
    approval_add,
    approval_detail,
    refresh_requirement,
    requirement_detail,
)
from movements.services.effects import after_approval_recorded, after_request_created
from movements.services.guards import lock_request, require_reason
from movements.services.progress import (
    advance_after_completion,
    apply_request_state_from_nodes,
    compute_frontier,
    new_attempt,
    refresh_frontier,
    start_roots,
)
from movements.services.state import (
    batch,
    record_event,
    save_fields,
    set_node_state,
    set_request_state,
)
from movements.services.templates import route_template_current
from movements.services.writers import RowWriter
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import (
    ActionRefused,
    DestinationNotAllowlisted,
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidInput,
    NotFound,
    QTGError,
    ReservationRefused,
    TemplateInvalid,
)
from qtg.core.policies import enforce
from qtg.core.venues import canonical_venue, is_known_venue

MAX_AMOUNT = Decimal("1e20")
AMOUNT_CONTEXT = Context(prec=MovementRequest._meta.get_field("amount").max_digits)
SQLITE_EXACT_DIGITS = 15


def _parse_amount(amount: Any) -> Decimal:
    if isinstance(amount, float):
        raise InvalidInput(
            "amount must be a decimal string, not a float", details={"amount": ["float"]}
        )
    try:
        value = Decimal(str(amount))
    except (InvalidOperation, ValueError):
        raise InvalidInput("amount is not a number", details={"amount": ["invalid"]}) from None
    if not value.is_finite() or value <= 0 or value >= MAX_AMOUNT:
        raise InvalidInput("amount must be positive", details={"amount": ["out of range"]})
    if value.as_tuple().exponent < -18:
        raise InvalidInput(
            "amount has more than 18 decimal places", details={"amount": ["too precise"]}
        )
    digits = len(value.normalize(AMOUNT_CONTEXT).as_tuple().digits)
    if not settings.DB_IS_POSTGRES and digits > SQLITE_EXACT_DIGITS:
        # SQLite keeps a decimal column as a REAL: beyond 15 significant digits the amount
        # would be silently rounded, and money is never silently rounded.
        raise InvalidInput(
            f"amount has {digits} significant digits; the embedded SQLite database stores "
            f"{SQLITE_EXACT_DIGITS} exactly (use PostgreSQL for more)",
            details={"amount": ["too precise for this database"]},
        )
    return value


def request_fingerprint(**body: Any) -> str:
    """A stable hash of a create request's body, to tell a replay from a different request."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def idempotency_keys_purge(*, now: datetime | None = None) -> int:
    """Forget the idempotency keys older than QTG_IDEMPOTENCY_KEY_RETENTION_DAYS (the key may
    then be used again); return how many movements let go of theirs."""
    cutoff = (now or timezone.now()) - settings.QTG_IDEMPOTENCY_KEY_RETENTION
    # Not a state: the one column written here is the key itself.
    return MovementRequest.objects.filter(
        idempotency_key__isnull=False, created_at__lt=cutoff
    ).update(idempotency_key=None)


def _forget_expired_key(*, existing: MovementRequest) -> None:
    """A key past its retention is forgotten now, whether or not the purge ran yet."""
    MovementRequest.objects.filter(pk=existing.pk, idempotency_key=existing.idempotency_key).update(
        idempotency_key=None
    )


def _claim_key(*, created_by: Any, idempotency_key: str) -> None:
    """On PostgreSQL, hold the key for this transaction; a concurrent request with the same
    key is told the first one is still in progress (IETF draft: 409) instead of waiting.
    SQLite runs one write transaction at a time: there a duplicate waits and replays."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"qtg-idempotency:{created_by.pk if created_by else ''}:{idempotency_key}"],
        )
        (acquired,) = cursor.fetchone()
    if not acquired:
        raise IdempotencyInProgress(
            "a request with this Idempotency-Key is still being processed: retry it shortly",
            details={"idempotency_key": idempotency_key},
        )


def _replay(*, created_by: Any, idempotency_key: str, fingerprint: str) -> MovementRequest | None:
    existing = MovementRequest.objects.filter(
        created_by=created_by, idempotency_key=idempotency_key
    ).first()
    if existing is None:
        return None
    if existing.created_at < timezone.now() - settings.QTG_IDEMPOTENCY_KEY_RETENTION:
        _forget_expired_key(existing=existing)
        return None
    if existing.request_fingerprint != fingerprint:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used with a different request body",
            details={"idempotency_key": idempotency_key, "movement_id": str(existing.pk)},
        )
    existing.replayed = True
    return existing


def _build_plan(request: MovementRequest, plan: Any) -> list[MovementRequestNode]:
    plan_nodes = {
        node.key: MovementPlanNode(
            request=request,
            key=node.key,
            kind=node.kind,
            executor=node.executor,
            has_side_effect=node.has_side_effect,
            signing_required=node.signing_required,
            config=node.config,
            condition=node.condition,
            position=node.position,
        )
        for node in plan.nodes
    }
    MovementPlanNode.objects.bulk_create(plan_nodes.values())
    MovementPlanEdge.objects.bulk_create(
        MovementPlanEdge(request=request, source=plan_nodes[s], target=plan_nodes[t])
        for s, t in plan.edges
    )
    return MovementRequestNode.objects.bulk_create(
        MovementRequestNode.attempt_of(plan_node, request=request)
        for plan_node in plan_nodes.values()
    )


def movement_create(
    *,
    template: str,
    asset: str,
    amount: Any,
    source: str,
    destination: str,
    actor: Actor,
    params: dict[str, Any] | None = None,
    expires_in: timedelta | None = None,
    idempotency_key: str | None = None,
) -> MovementRequest:
    """Receive a movement: RECEIVED -> VALIDATED -> PENDING_APPROVAL, or RECEIVED -> FAILED
    with the reason recorded when the template, its params or the hardcap refuse it.

    With an ``idempotency_key`` the same body returns the original movement (``replayed`` is
    True on it), a different body raises IdempotencyConflict, and a duplicate arriving while
    the first is still being created raises IdempotencyInProgress (PostgreSQL).
    """
    amount = _parse_amount(amount)
    errors = {}
    for name, value in (
        ("template", template),
        ("asset", asset),
        ("source", source),
        ("destination", destination),
    ):
        if not isinstance(value, str) or not value.strip():
            errors[name] = ["required"]
    if params is not None and not isinstance(params, dict):
        errors["params"] = ["must be an object"]
    elif params and "sandbox" in params and not settings.QTG_SANDBOX_ENABLED:
        errors["params"] = ["sandbox faults are refused: the sandbox is switched off"]
    if expires_in is not None and expires_in <= timedelta(0):
        errors["expires_in"] = ["must be positive"]
    elif expires_in is not None and expires_in > settings.QTG_MAX_APPROVAL_TTL:
        errors["expires_in"] = [
            f"at most {int(settings.QTG_MAX_APPROVAL_TTL.total_seconds())} seconds: a "
            f"movement waiting for approval holds its amount against the hardcap"
        ]
    for name, value in (("source", source), ("destination", destination)):
        if name not in errors and not is_known_venue(value):
            errors[name] = [f"unknown venue {canonical_venue(value)!r} (see QTG_KNOWN_VENUES)"]
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 255):
        errors["idempotency_key"] = ["must be 1 to 255 characters"]
    if errors:
        raise InvalidInput("the movement request is invalid", details=errors)
    asset = asset.strip().upper()
    # One spelling per venue before anything compares it (the hardcap scope, the fingerprint).
    source, destination = canonical_venue(source), canonical_venue(destination)
    params = params or {}
    created_by = actor.user
    fingerprint = request_fingerprint(
        template=template,
        asset=asset,
        # normalize() under the default 28-digit context would round a 38-digit amount and
        # let two different amounts share a fingerprint.
        amount=str(amount.normalize(AMOUNT_CONTEXT)),
        source=source,
        destination=destination,
        params=params,
        expires_in=expires_in.total_seconds() if expires_in else None,
    )
    if idempotency_key:
        replay = _replay(
            created_by=created_by, idempotency_key=idempotency_key, fingerprint=fingerprint
        )
        if replay is not None:
            return replay
    try:
        with transaction.atomic():
            if idempotency_key:
                _claim_key(created_by=created_by, idempotency_key=idempotency_key)
            request = _create(
                template=template,
                asset=asset,
                amount=amount,
                source=source,
                destination=destination,
                params=params,
                expires_in=expires_in,
                idempotency_key=idempotency_key,
                fingerprint=fingerprint,
                actor=actor,
            )
    except IntegrityError:
        # A concurrent create with the same key won the race: return it (or refuse).
        replay = None
        if idempotency_key:
            replay = _replay(
                created_by=created_by, idempotency_key=idempotency_key, fingerprint=fingerprint
            )
        if replay is None:
            raise
        return replay
    request.replayed = False
    return request


def _create(
    *,
    template,
    asset,
    amount,
    source,
    destination,
    params,
    expires_in,
    idempotency_key,
    fingerprint,
    actor,
) -> MovementRequest:
    now = timezone.now()
    request = MovementRequest.objects.create(
        template_key=template,
        asset=asset,
        amount=amount,
        source=source,
        destination=destination,
        params=params,
        idempotency_key=idempotency_key or None,
        request_fingerprint=fingerprint,
        created_by=actor.user,
        expires_at=now + (expires_in or settings.QTG_DEFAULT_APPROVAL_TTL),
        created_at=now,
        state_changed_at=now,
    )
    # The row is this transaction's own (nobody else sees it yet): its events and changes
    # are written together, with one chain-hash query and one row update.
    with batch() as writer:
        record_event(
            request=request,
            actor=actor,
            kind=MovementEvent.Kind.CREATED,
            new_state=RequestState.RECEIVED,
            detail={
                "template": template,
                "asset": asset,
                "amount": str(amount),
                "source": source,
                "destination": destination,
            },
            writer=writer,
        )
        after_request_created(request=request)
        route_template = route_template_current(template)
        try:
            if route_template is None:
                raise TemplateInvalid(f"unknown route template {template!r}")
            plan = compile_plan(
                route_template.definition,
                asset=asset,
                amount=amount,
                source=source,
                destination=destination,
                params=params,
            )
            _validate_with_executors(
                plan, asset=asset, amount=amount, source=source, destination=destination
            )
        except TemplateInvalid as exc:
            return _fail_validation(request, actor, exc, writer=writer)

        request.template = route_template
        request.template_version = route_template.version
        request.params = plan.params
        apply_approval_policy(request)
        save_fields(
            request,
            [
                "template",
                "template_version",
                "params",
                "approval_policy",
                "approvals_required",
                "approval_groups",
            ],
            writer=writer,
        )
        standing, entry = standing_of(request)
        if standing == Standing.NOT_ALLOWLISTED:
            return _fail_validation(
                request,
                actor,
                DestinationNotAllowlisted(
                    standing_message(request, standing, entry),
                    details={"destination": request.destination, "asset": request.asset},
                ),
                writer=writer,
            )
    try:
        with transaction.atomic():
            nodes = _build_plan(request, plan)
            with batch() as writer:
                set_request_state(
                    request=request,
                    new_state=RequestState.VALIDATED,
                    actor=actor,
                    detail={
                        "plan": [node.key for node in plan.nodes],
                        **requirement_detail(request),
                    },
                    nodes=nodes,
                    writer=writer,
                )
                set_request_state(
                    request=request,
                    new_state=RequestState.PENDING_APPROVAL,
                    actor=actor,
                    nodes=nodes,
                    writer=writer,
                )
            # The hold comes last: every create of the asset queues on its hardcap rows, which
            # stay locked only for the hold's own statements and the commit. Refused, the
            # plan and the two transitions above roll back with the savepoint.
            ports.reservations().hold(request=request, actor=actor)
    except ReservationRefused as exc:
        return _fail_validation(MovementRequest.objects.get(pk=request.pk), actor, exc)
    return request


def _validate_with_executors(
    plan: CompiledPlan, *, asset: str, amount: Decimal, source: str, destination: str
) -> None:
    """Each node's executor may refuse, before anything is held, a movement it could never
    carry out (``Executor.validate``): the movement fails validation with its reason; an
    amount the venue can never carry out is the caller's input refused (``InvalidInput``:
    the create's transaction is rolled back, nothing is written)."""
    for node in plan.nodes:
        spec = NodeSpec(
            node_key=node.key,
            asset=asset,
            amount=amount,
            source=source,
            destination=destination,
            config=dict(node.config),
            params=dict(plan.params),
        )
        try:
            get_executor(node.executor).validate(spec)
        except AmountRefused as exc:
            raise InvalidInput(
                "the amount is not one the venue can carry out",
                details={"amount": [exc.message], **_rules_detail(exc)},
            ) from exc
        except DeterministicError as exc:
            raise TemplateInvalid(f"node {node.key!r}: {exc.message}") from exc


def _rules_detail(exc: AmountRefused) -> dict[str, Any]:
    """What the venue allows (its precision, minimum, fee), when the refusal says."""
    rules = exc.evidence.get("exchange_rules") or exc.evidence.get("venue_rules")
    return {"allowed": rules} if isinstance(rules, dict) else {}


def _fail_validation(
    request: MovementRequest, actor: Actor, exc: QTGError, *, writer: RowWriter | None = None
) -> MovementRequest:
    # The event keeps the structured details as evidence; what only operators may read (the
    # platform-wide amount in flight) goes under OPERATOR_DETAIL, which the API leaves out.
    request.failure_reason = exc.message
    detail = {"reason": exc.message, "code": exc.code, **exc.details}
    if isinstance(exc, ReservationRefused) and exc.operator_details:
        detail[OPERATOR_DETAIL] = {"reason": exc.operator_message, **exc.operator_details}
    set_request_state(
        request=request,
        new_state=RequestState.FAILED,
        actor=actor,
        detail=detail,
        update_fields=["failure_reason"],
        nodes=[],
        writer=writer,
    )
    return request


def _cancel_waiting_nodes(
    request: MovementRequest, nodes: list[MovementRequestNode], actor: Actor, reason: str
) -> None:
    for node in nodes:
        if node.node_state in (NodeState.BLOCKED, NodeState.READY):
            set_node_state(
                node=node, new_state=NodeState.CANCELLED, actor=actor, detail={"reason": reason}
            )
    request.current_frontier = compute_frontier(nodes)
    save_fields(request, ["current_frontier"])


@transaction.atomic
def movement_approve(*, request: MovementRequest | Any, actor: Actor) -> MovementRequest:
    """Record one approval, bound to the movement as it is now (plan, amount, asset, source,
    destination). Once the approval policy's quorum is met (distinct approvers, none the
    creator, the required groups covered): PENDING_APPROVAL -> APPROVED and the root nodes
    become READY; until then the movement stays PENDING_APPROVAL."""
    enforce(permission_refusal(actor, Action.APPROVE))
    request = lock_request(request)
    refresh_requirement(request, actor=actor)
    approvals: list[MovementApproval] = valid_approvals(request)
    enforce(approve_refusal(actor=actor, movement=request, now=timezone.now(), approvals=approvals))
    approval = approval_add(request=request, actor=actor, approvals=approvals)
    detail = approval_detail(request, approval, approvals)
    if not quorum_met(request, approvals):
        # The movement stays PENDING_APPROVAL; the approval is its own audit record.
        record_event(request=request, actor=actor, detail=detail)
        after_approval_recorded(request=request, received=distinct_approvers(approvals))
        return request
    request.approved_by = actor.user
    request.approved_at = approval.approved_at
    set_request_state(
        request=request,
        new_state=RequestState.APPROVED,
        actor=actor,
        update_fields=["approved_by", "approved_at"],
        detail=detail,
    )
    start_roots(request, actor=actor)
    return request


def _end_before_execution(
    request, *, new_state, actor, reason, detail=None, update_fields=()
) -> MovementRequest:
    request.failure_reason = reason
    nodes = current_nodes(request, lock=True)
    _cancel_waiting_nodes(request, nodes, actor, reason)
    set_request_state(
        request=request,
        new_state=new_state,
        actor=actor,
        nodes=nodes,
        detail={"reason": reason, **(detail or {})},
        update_fields=["failure_reason", *update_fields],
    )
    return request


@transaction.atomic
def movement_reject(
    *, request: MovementRequest | Any, actor: Actor, reason: str
) -> MovementRequest:
    """PENDING_APPROVAL -> REJECTED with a reason; the reservation is released."""
    enforce(permission_refusal(actor, Action.REJECT))
    reason = require_reason(reason, "reject")
    request = lock_request(request)
    enforce(reject_refusal(actor=actor, movement=request))
    return _end_before_execution(
        request, new_state=RequestState.REJECTED, actor=actor, reason=reason
    )


@transaction.atomic
def movement_withdraw(
    *, request: MovementRequest | Any, actor: Actor, reason: str
) -> MovementRequest:
    """The creator (or a supervisor) withdraws a movement waiting for approval:
    PENDING_APPROVAL -> REJECTED with the reason and who withdrew it; the reservation is
    released and the ``request_rejected`` callback says ``withdrawn_by``."""
    reason = require_reason(reason, "withdraw")
    request = lock_request(request)
    enforce(withdraw_refusal(actor=actor, movement=request))
    request.withdrawn_by = actor.user
    return _end_before_execution(
        request,
        new_state=RequestState.REJECTED,
        actor=actor,
        reason=reason,
        detail={"withdrawn_by": actor.user.get_username() if actor.user else str(actor)},
        update_fields=["withdrawn_by"],
    )


@transaction.atomic
def movement_expire(*, request: MovementRequest | Any, actor: Actor) -> MovementRequest:
    """PENDING_APPROVAL -> EXPIRED once ``expires_at`` has passed."""
    request = lock_request(request)
    enforce(expire_refusal(movement=request, now=timezone.now()))
    return _end_before_execution(
        request,
        new_state=RequestState.EXPIRED,
        actor=actor,
        reason=f"approval window closed at {request.expires_at.isoformat()}",
    )


def expire_overdue_approvals(*, actor: Actor, limit: int = 500) -> int:
    """Expire every PENDING_APPROVAL request past its ``expires_at``; return how many."""
    overdue = MovementRequest.objects.filter(
        request_state=RequestState.PENDING_APPROVAL, expires_at__lte=timezone.now()
    ).values_list("pk", flat=True)[:limit]
    expired = 0
    for pk in list(overdue):
        try:
            movement_expire(request=pk, actor=actor)
            expired += 1
        except (ActionRefused, NotFound):
            continue  # approved, rejected or expired by someone else meanwhile
    return expired


@transaction.atomic
def movement_cancel(
    *,
    request: MovementRequest | Any,
    actor: Actor,
    reason: str,
    acknowledge_funds_in_transit: bool = False,
    override: OverrideProposal | None = None,
) -> MovementRequest:
    """EXECUTING/WAITING_MANUAL_ACTION -> CANCELLED; refused while any node is in flight
    (PREPARING..OBSERVING or UNKNOWN). BLOCKED and READY nodes become CANCELLED. After a side
    effect completed, only with the supervisor's permission and the acknowledgement that the
    funds in transit are no longer watched (their reservation stays HELD), and then as the
    confirmation of another supervisor's proposal (``override``) under the two-person rule."""
    enforce(permission_refusal(actor, Action.CANCEL))
    reason = require_reason(reason, "cancel")
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(
        cancel_refusal(
            actor=actor,
            movement=request,
            nodes=nodes,
            acknowledged=bool(acknowledge_funds_in_transit),
        )
    )
    in_transit = funds_in_transit(nodes)
    if in_transit:
        enforce(_two_person(OverrideAction.CANCEL_IN_TRANSIT, request, override))
        record_event(
            request=request,
            actor=actor,
            detail={
                "cancelled_with_funds_in_transit": in_transit,
                "acknowledged": True,
                "reason": reason,
            },
        )
    return _end_before_execution(
        request, new_state=RequestState.CANCELLED, actor=actor, reason=reason
    )


def _two_person(action: str, request: MovementRequest, override: OverrideProposal | None):
    return two_person_refusal(
        action=action,
        movement=request,
        override=override,
        enabled=settings.QTG_TWO_PERSON_OVERRIDES,
    )


def _named(nodes: list[MovementRequestNode], node_key: str) -> MovementRequestNode:
    return next(n for n in nodes if n.node_key == node_key)


@transaction.atomic
def manual_gate_resume(
    *, request: MovementRequest | Any, actor: Actor, node_key: str | None = None, note: str = ""
) -> MovementRequest:
    """Release a READY manual gate: the gate completes and the frontier moves past it."""
    enforce(permission_refusal(actor, Action.RESUME_GATE))
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(resume_gate_refusal(actor=actor, movement=request, nodes=nodes, node_key=node_key))
    gates = waiting_gates(nodes, node_key)
    if len(gates) > 1:
        raise InvalidInput(
            "several manual gates are waiting: name one",
            details={"node_key": [g.node_key for g in gates]},
        )
    gate = gates[0]
    detail = {"released_by": str(actor), "note": note}
    if request.request_state == RequestState.WAITING_MANUAL_ACTION:
        set_request_state(
            request=request,
            new_state=RequestState.EXECUTING,
            actor=actor,
            nodes=nodes,
            detail={"manual_gate": gate.node_key, "note": note},
        )
    set_node_state(node=gate, new_state=NodeState.OBSERVING, actor=actor, detail=detail)
    set_node_state(node=gate, new_state=NodeState.COMPLETED, actor=actor, detail=detail)
    advance_after_completion(request, gate, actor=actor, nodes=nodes)
    return request


UNKNOWN_OUTCOMES = (NodeState.SUBMITTED, NodeState.COMPLETED, NodeState.FAILED)


@transaction.atomic
def node_resolve_unknown(
    *,
    request: MovementRequest | Any,
    node_key: str,
    outcome: str,
    evidence: Any,
    actor: Actor,
    external_ref: str = "",
    override: OverrideProposal | None = None,
) -> MovementRequest:
    """An operator reconciles an UNKNOWN node by hand, with the evidence that says so: as an
    outcome its executor can continue from (SUBMITTED only where it can watch a submit
    settle; COMPLETED; FAILED), with the venue's reference (withdrawal id, tx hash) where the
    steps after it need one. The reference is stored on the node and those steps run.
    "Never happened" (FAILED) is a two-person override: ``override`` is the confirmed
    proposal."""
    enforce(permission_refusal(actor, Action.RESOLVE_UNKNOWN))
    if outcome not in UNKNOWN_OUTCOMES:
        raise InvalidInput(
            "outcome must be SUBMITTED, COMPLETED or FAILED",
            details={"outcome": [f"not one of {', '.join(UNKNOWN_OUTCOMES)}"]},
        )
    if not evidence or (isinstance(evidence, str) and not evidence.strip()):
        raise InvalidInput(
            "evidence is required to resolve an UNKNOWN node", details={"evidence": ["required"]}
        )
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(resolve_unknown_refusal(actor=actor, movement=request, nodes=nodes, node_key=node_key))
    node = _named(nodes, node_key)
    enforce(resolve_outcome_refusal(node=node, outcome=outcome, external_ref=external_ref))
    if outcome == NodeState.FAILED:
        enforce(_two_person(OverrideAction.RESOLVE_NEVER_HAPPENED, request, override))
    node.lease_owner, node.lease_expires_at = "", None
    fields = ["lease_owner", "lease_expires_at"]
    detail = {"resolution": "manual", "evidence": evidence}
    if (external_ref or "").strip():
        node.external_ref = external_ref.strip()
        fields.append("external_ref")
        detail["external_ref"] = node.external_ref
    if outcome == NodeState.SUBMITTED:
        node.next_attempt_at = timezone.now()  # watched again at once
        fields.append("next_attempt_at")
    node.last_error = resolution_reason(f"resolving {node_key} as {outcome}", actor, str(evidence))
    fields.append("last_error")
    set_node_state(
        node=node,
        new_state=outcome,
        actor=actor,
        detail=detail,
        update_fields=fields,
    )
    if request.failure_reason:
        request.failure_reason = node.last_error
        save_fields(request, ["failure_reason"])
    if outcome == NodeState.COMPLETED:
        advance_after_completion(request, node, actor=actor, nodes=nodes)
    else:
        apply_request_state_from_nodes(request, actor=actor, nodes=nodes)
    return request


@transaction.atomic
def intervention_resume(
    *, request: MovementRequest | Any, actor: Actor, reason: str
) -> MovementRequest:
    """MANUAL_INTERVENTION -> EXECUTING once no node is FAILED or UNKNOWN; the frontier is
    re-examined so nodes whose predecessors are done wake up."""
    enforce(permission_refusal(actor, Action.INTERVENTION_RESUME))
    reason = require_reason(reason, "resume")
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(intervention_resume_refusal(actor=actor, movement=request, nodes=nodes))
    request.failure_reason = resolution_reason("resume", actor, reason)
    set_request_state(
        request=request,
        new_state=RequestState.EXECUTING,
        actor=actor,
        nodes=nodes,
        detail={"reason": reason},
        update_fields=["failure_reason"],
    )
    refresh_frontier(request, actor=actor)
    return request


@transaction.atomic
def intervention_retry(
    *, request: MovementRequest | Any, node_key: str, actor: Actor, reason: str
) -> MovementRequest:
    """A new attempt of a FAILED node. The failed attempt keeps its history and no longer
    counts in derivation; the request goes back to EXECUTING once nothing else is stuck."""
    enforce(permission_refusal(actor, Action.INTERVENTION_RETRY))
    reason = require_reason(reason, "retry")
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(retry_refusal(actor=actor, movement=request, nodes=nodes, node_key=node_key))
    failed = _named(nodes, node_key)
    nodes = new_attempt(request, failed, nodes, actor=actor, reason=reason)
    request.failure_reason = resolution_reason(f"retry of {node_key}", actor, reason)
    save_fields(request, ["failure_reason"])
    apply_request_state_from_nodes(request, actor=actor, nodes=nodes, detail={"reason": reason})
    return request


def resolution_reason(action: str, actor: Actor, reason: str) -> str:
    """The reason a movement shows once a person resolved it: who did what, and why (it
    replaces the venue's or recovery's reason that brought the movement to them)."""
    who = actor.user.get_username() if actor.user is not None else actor.id
    return f"resolved by {action} by {who}: {reason}"[:2000]


def _force_finish(
    request: MovementRequest,
    *,
    new_state: RequestState,
    actor: Actor,
    reason: str,
    override: OverrideProposal | None,
):
    nodes = current_nodes(request, lock=True)
    completing = new_state == RequestState.COMPLETED
    policy = force_complete_refusal if completing else force_fail_refusal
    enforce(policy(actor=actor, movement=request, nodes=nodes))
    action = OverrideAction.FORCE_COMPLETE if completing else OverrideAction.FORCE_FAIL
    enforce(_two_person(action, request, override))
    request.failure_reason = resolution_reason(
        "force-complete" if completing else "force-fail", actor, reason
    )
    _cancel_waiting_nodes(request, nodes, actor, reason)
    set_request_state(
        request=request,
        new_state=new_state,
        actor=actor,
        nodes=nodes,
        detail={"reason": reason, "forced": True},
        update_fields=["failure_reason"],
    )
    return request


@transaction.atomic
def intervention_force_complete(
    *,
    request: MovementRequest | Any,
    actor: Actor,
    reason: str,
    override: OverrideProposal | None = None,
) -> MovementRequest:
    """MANUAL_INTERVENTION -> COMPLETED on an operator's word; the reservation is consumed.
    Under the two-person rule only as the confirmation of another supervisor's proposal
    (``override``; ``movements.services.overrides``)."""
    enforce(permission_refusal(actor, Action.FORCE_COMPLETE))
    reason = require_reason(reason, "force-complete")
    request = lock_request(request)
    return _force_finish(
        request, new_state=RequestState.COMPLETED, actor=actor, reason=reason, override=override
    )


@transaction.atomic
def intervention_force_fail(
    *,
    request: MovementRequest | Any,
    actor: Actor,
    reason: str,
    override: OverrideProposal | None = None,
) -> MovementRequest:
    """MANUAL_INTERVENTION -> FAILED on an operator's word; the reservation stays held when a
    side effect completed (an operator settles it). Under the two-person rule only as the
    confirmation of another supervisor's proposal (``override``)."""
    enforce(permission_refusal(actor, Action.FORCE_FAIL))
    reason = require_reason(reason, "force-fail")
    request = lock_request(request)
    return _force_finish(
        request, new_state=RequestState.FAILED, actor=actor, reason=reason, override=override
    )

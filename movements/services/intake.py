"""Intake: a movement is created (validated, its plan compiled, its reservation held) exactly
once per idempotency key.

Every service takes keyword-only arguments and the acting user or system component, locks the
rows it changes, asks the action's policy (``movements.policies``) and raises its refusal, and
changes state only through ``set_request_state`` / ``set_node_state``.
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
from movements.executors.base import AmountRefused, DeterministicError, NodeSpec, ParamRefused
from movements.models import (
    OPERATOR_DETAIL,
    MovementEvent,
    MovementPlanEdge,
    MovementPlanNode,
    MovementRequest,
    MovementRequestNode,
)
from movements.selectors import details_held, reservation_known
from movements.services.address_book import Standing, standing_message, standing_of
from movements.services.approvals import (
    apply_approval_policy,
    requirement_detail,
)
from movements.services.effects import after_request_created
from movements.services.state import (
    batch,
    record_event,
    set_request_state,
)
from movements.services.templates import route_template_current
from movements.services.writers import RowWriter
from movements.states import RequestState
from qtg.core.actors import Actor
from qtg.core.chain import GENESIS, heads_known
from qtg.core.errors import (
    DestinationNotAllowlisted,
    IdempotencyConflict,
    IdempotencyInProgress,
    InvalidInput,
    QTGError,
    ReservationRefused,
    TemplateInvalid,
)
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
    body = {
        "template": template,
        "asset": asset,
        "amount": amount,
        "source": source,
        "destination": destination,
        "params": params,
        "expires_in": expires_in,
        "idempotency_key": idempotency_key,
        "fingerprint": fingerprint,
        "actor": actor,
    }
    try:
        try:
            request = _create_in_transaction(body, refused=None)
        except ReservationRefused as refused:
            # The hold came last and refused: the create's transaction rolled back whole
            # (nothing of it was held or sent). The movement is recorded FAILED with the
            # refusal, in a transaction of its own.
            request = _create_in_transaction(body, refused=refused)
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


def _create_in_transaction(
    body: dict[str, Any], *, refused: ReservationRefused | None
) -> MovementRequest:
    """One attempt at the create, in its own transaction (the idempotency key held for it)."""
    # One read of the subscriptions for the create's callback events.
    with ports.callbacks().read_once(), transaction.atomic():
        if body["idempotency_key"]:
            _claim_key(created_by=body["actor"].user, idempotency_key=body["idempotency_key"])
        return _create(**body, refused=refused)


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
    refused: ReservationRefused | None = None,
) -> MovementRequest:
    now = timezone.now()
    request = MovementRequest(
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
    # Validated before the row is written, so it is written once with its template, plan
    # params and approval policy: no UPDATE after the INSERT. An amount or a param the venue
    # refuses is a 400 before anything is written; a template that cannot carry the movement
    # is recorded (RECEIVED -> FAILED, in ``_receive``).
    plan = _validated_plan(request)
    request.save(force_insert=True)
    # The row is this transaction's own (nobody else sees it yet): its audit stream starts
    # here (no head to read), and its callback events show it from what the service holds.
    nodes: list[MovementRequestNode] = []
    reservation_known(request, None)
    with (
        heads_known({MovementEvent: {request.pk: GENESIS}}),
        details_held(request, nodes=nodes, approvals=[], attentions=[]),
    ):
        return _receive(request, actor, nodes, plan, refused=refused)


def _validated_plan(request: MovementRequest) -> CompiledPlan | TemplateInvalid:
    """The request's compiled plan, with its template, plan params and approval policy set on
    it; or, when the template cannot carry it, the refusal."""
    route_template = route_template_current(request.template_key)
    try:
        if route_template is None:
            raise TemplateInvalid(f"unknown route template {request.template_key!r}")
        plan = compile_plan(
            route_template.definition,
            asset=request.asset,
            amount=request.amount,
            source=request.source,
            destination=request.destination,
            params=request.params,
        )
        _validate_with_executors(
            plan,
            asset=request.asset,
            amount=request.amount,
            source=request.source,
            destination=request.destination,
        )
    except TemplateInvalid as exc:
        return exc
    request.template = route_template
    request.template_version = route_template.version
    request.params = plan.params
    apply_approval_policy(request)
    return plan


def _receive(
    request: MovementRequest,
    actor: Actor,
    nodes: list[MovementRequestNode],
    plan: CompiledPlan | TemplateInvalid,
    *,
    refused: ReservationRefused | None = None,
) -> MovementRequest:
    """RECEIVED -> VALIDATED -> PENDING_APPROVAL with the reservation held, or FAILED (the
    template's refusal in place of ``plan``, the address book, or ``refused``: the hardcap's
    refusal of an earlier attempt, rolled back whole). Each step's events and changes are
    written together, with one row update; ``nodes`` receives the plan's nodes as they are
    built. The hold comes last and, refused, raises ``ReservationRefused`` out of the create's
    transaction (``movement_create`` records the refusal in a transaction of its own): every
    create of the asset queues on its hardcap rows, which stay locked only for the hold's own
    statements and the commit."""
    template, amount = request.template_key, request.amount
    # The callback events (request_created, then approval_pending), each showing the movement
    # as it was when it happened, are written together: one insert of the events and one of
    # their deliveries, before the hold.
    with ports.callbacks().together():
        with batch() as writer:
            record_event(
                request=request,
                actor=actor,
                kind=MovementEvent.Kind.CREATED,
                new_state=RequestState.RECEIVED,
                detail={
                    "template": template,
                    "asset": request.asset,
                    "amount": str(amount),
                    "source": request.source,
                    "destination": request.destination,
                },
                writer=writer,
            )
            after_request_created(request=request)
            if isinstance(plan, TemplateInvalid):
                return _created(_fail_validation(request, actor, plan, writer=writer), [])
            standing, entry = standing_of(request)
            if standing == Standing.NOT_ALLOWLISTED:
                failed = _fail_validation(
                    request,
                    actor,
                    DestinationNotAllowlisted(
                        standing_message(request, standing, entry),
                        details={"destination": request.destination, "asset": request.asset},
                    ),
                    writer=writer,
                )
                return _created(failed, [])
        if refused is not None:
            return _created(_fail_validation(request, actor, refused), [])
        nodes.extend(_build_plan(request, plan))
        # Held from here: what the transitions' effects (notifications) read of it too.
        _created(request, nodes)
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
    reservation = ports.reservations().hold(request=request, actor=actor)
    reservation_known(request, reservation)
    return _created(request, list(nodes))


def _created(request: MovementRequest, nodes: list[MovementRequestNode]) -> MovementRequest:
    """``request`` as created, with its nodes (``created_nodes``): the API answers with it
    without reading it again (``movements.api.serializers.created_representation``)."""
    request.created_nodes = nodes
    return request


def _validate_with_executors(
    plan: CompiledPlan, *, asset: str, amount: Decimal, source: str, destination: str
) -> None:
    """Each node's executor may refuse, before anything is held, a movement it could never
    carry out (``Executor.validate``): the movement fails validation with its reason; an
    amount (or a param) the venue can never carry out is the caller's input refused
    (``InvalidInput``: the create's transaction is rolled back, nothing is written)."""
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
        except ParamRefused as exc:
            raise InvalidInput(
                f"param {exc.param!r} is not one the venue can accept",
                details={"params": {exc.param: [exc.message]}},
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

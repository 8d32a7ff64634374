"""Webhook callbacks through a transactional outbox.

``callback_enqueue`` (the seam the movement lifecycle calls) writes one Delivery row per
interested subscription inside the transaction of the state change, and asks for a delivery
task only once that transaction commits. ``delivery_send`` makes one attempt: it claims the
row (pushing ``next_attempt_at`` out by a lease, so nobody else sends it meanwhile), posts
OUTSIDE any transaction with short timeouts, then records the outcome: DELIVERED, a retry
with exponential backoff, or DEAD after the configured number of attempts. The periodic sweep
``deliveries_enqueue_due`` only queues tasks for what is due; it never sends.
"""

import json
import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import Max, Subquery
from django.utils import timezone

from callbacks import instruments, signing
from callbacks.deadline import Deadline
from callbacks.events import EVENT_TYPES, TEST_EVENT_TYPE
from callbacks.models import (
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    Event,
    FeedCounter,
    Subscription,
)
from callbacks.targets import TargetRefused, pin_target_url
from movements.public import (
    MovementRequest,
    after_writes_together,
    movement_payloads,
    movement_visible_to,
    record_decision,
)
from qtg.core import outbox
from qtg.core.actors import Actor
from qtg.core.compiled import Compiled
from qtg.core.contract import CONTRACT_VERSION
from qtg.core.errors import ActionRefused, NotFound, NotPermitted
from qtg.core.keyed import KeyColumn

__all__ = [
    "EVENT_TYPES",
    "PAYLOAD_VERSION",
    "backoff_delay",
    "callback_enqueue",
    "deliveries_enqueue_due",
    "delivery_redeliver",
    "delivery_send",
    "events_publish",
    "events_recorded_together",
    "subscription_delete",
    "subscription_rotate_secret",
    "subscription_send_test",
    "subscriptions_read_once",
]

logger = logging.getLogger(__name__)

USER_AGENT = f"QTG-Webhooks/{CONTRACT_VERSION}"
RESPONSE_EXCERPT_BYTES = 1024
# The payload's shape is the contract's version (docs/contract-changelog.md): since 1.1
# {"type", "timestamp", "data": movement + sequence, ...} signed per Standard Webhooks (1 was
# the X-QTG-* scheme with a payload of our own); 1.2 added event types and their contexts.
PAYLOAD_VERSION = CONTRACT_VERSION


DELIVER_TASK = "callbacks.deliver"
FIRST_EVENT_TYPE = "request_created"


def _setting(name: str) -> Any:
    return getattr(settings, name)


def backoff_delay(attempts: int) -> timedelta:
    """How long to wait after the ``attempts``-th failed attempt (``qtg.core.outbox``)."""
    return outbox.backoff_delay(
        attempts,
        base=float(_setting("QTG_CALLBACKS_BACKOFF_SECONDS")),
        cap=float(_setting("QTG_CALLBACKS_BACKOFF_MAX_SECONDS")),
    )


def _body(
    *,
    event_id: uuid.UUID,
    event_type: str,
    occurred_at,
    data: dict[str, Any],
    context: dict[str, Any],
) -> str:
    """The payload: Standard Webhooks' ``type`` / ``timestamp`` / ``data``, our ``version``,
    the event ``id`` (also the ``webhook-id`` header and the feed's id) and ``context``, what
    this event adds to the movement (the previous state, the nodes that woke, ...)."""
    payload = {
        "id": str(event_id),
        "type": event_type,
        "timestamp": occurred_at.isoformat().replace("+00:00", "Z"),
        "version": PAYLOAD_VERSION,
        "data": data,
        "context": context,
    }
    return json.dumps(payload, cls=DjangoJSONEncoder, separators=(",", ":"))


def _queue(ids: Iterable[Any]) -> None:
    """Ask for one delivery task per row; a broker hiccup is left to the sweep."""
    outbox.queue(DELIVER_TASK, ids)


_READ_ONCE: ContextVar[dict[str, list[Subscription]] | None] = ContextVar(
    "qtg_subscriptions_read_once", default=None
)


@contextmanager
def subscriptions_read_once() -> Iterator[None]:
    """Within the block, ``callback_enqueue`` reads the active subscriptions once and reuses
    them: for a worker writing many state changes in one transaction, which then all see the
    subscriptions as they were when it began. The last event numbers the caller read with
    its locks (``sequences_known``) are used in it too."""
    token = _READ_ONCE.set({})
    try:
        yield
    finally:
        _READ_ONCE.reset(token)


_ACTIVE = Compiled(
    lambda: Subscription.objects.filter(is_active=True, deleted_at__isnull=True).select_related(
        "owner"
    )
)


def _active_subscriptions() -> list[Subscription]:
    cache = _READ_ONCE.get()
    if cache is not None and "active" in cache:
        return cache["active"]
    active = _ACTIVE()
    if cache is not None:
        cache["active"] = active
    return active


def _receives(subscription: Subscription, request: MovementRequest, event_type: str) -> bool:
    """An operator's subscription hears every movement; a client's only those it may see."""
    if not subscription.wants(event_type):
        return False
    return subscription.owner_id is None or movement_visible_to(subscription.owner, request)


def last_sequence(request: Any) -> Subquery:
    """The number of the newest event of the movement ``request`` names (an ``OuterRef``), or
    NULL: for a read that runs once the movement's row lock is held, and tells the numbers to
    ``sequences_known``."""
    return Subquery(
        Event.objects.filter(request_id=request)
        .order_by()
        .values("request_id")
        .annotate(last=Max("sequence"))
        .values("last")
    )


def sequences_known(last: Mapping[Any, int | None]) -> None:
    """Within ``subscriptions_read_once``: the number of each movement's newest event
    (``{movement id: number or None}``), read under the movement's row lock (``last_sequence``).
    The next events of those movements are numbered after it without reading it again; each
    number is used once, by the first events recorded (a later write reads it). Outside the
    block this does nothing."""
    cache = _READ_ONCE.get()
    if cache is not None:
        cache.setdefault("sequences", {}).update({pk: n or 0 for pk, n in last.items()})


def _known_sequences(request_ids: set[Any]) -> dict[Any, int]:
    """The numbers ``sequences_known`` was told for ``request_ids``, each taken once."""
    cache = _READ_ONCE.get()
    known = cache.get("sequences") if cache is not None else None
    if not known:
        return {}
    return {pk: known.pop(pk) for pk in request_ids if pk in known}


def _last_sequences(request_ids: set[Any]) -> dict[Any, int]:
    # Every state change, and so every event, happens under the movement's row lock (the
    # outbox's contract): its events are numbered one at a time, so the sequence a receiver
    # sorts by never repeats and never goes back (a unique constraint holds it to that).
    # Written out rather than built by the ORM: every state change asks it, and compiling
    # the query cost more than running it.
    quote, key = connection.ops.quote_name, KeyColumn(Event, "request")
    among, params = key.among(request_ids)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {key.column}, MAX({quote(Event._meta.get_field('sequence').column)}) "
            f"FROM {quote(Event._meta.db_table)} WHERE {among} GROUP BY {key.column}",
            params,
        )
        return {key.read(request): last for request, last in cursor.fetchall()}


@dataclass
class _Enqueued:
    request: MovementRequest
    event_type: str
    data: dict[str, Any] | None
    occurred_at: Any
    recorded: list[Delivery]
    payload: dict[str, Any] | None = None


_TOGETHER: ContextVar[list[_Enqueued] | None] = ContextVar("qtg_events_together", default=None)


@contextmanager
def events_recorded_together() -> Iterator[None]:
    """Within the block, each event still shows the movement as it was when the event was
    enqueued, but the events are written together when the block ends: one read of the
    sequences, one insert of the events, one of their deliveries (an approval's
    ``request_approved`` and ``frontier_advanced``). If the block raises, none is written.
    The caller holds the movements' row locks throughout, as for every event."""
    pending: list[_Enqueued] = []
    token = _TOGETHER.set(pending)
    try:
        yield
    finally:
        _TOGETHER.reset(token)
    _insert_events(pending)


def callback_enqueue(
    *, request: MovementRequest, event_type: str, data: dict[str, Any] | None = None
) -> list[Delivery]:
    """Record the event (for the feed) and a delivery for every active subscription that
    wants it, in the caller's transaction; delivery tasks are queued, and the event is
    published to the feed, only after it commits. Inside a worker's write batch the event is
    recorded when the batch has written its rows (its payload shows the movement as written;
    the batch's events read their movements together); the deliveries are returned when
    recorded at once."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown callback event type {event_type!r}")
    recorded: list[Delivery] = []
    after_writes_together(
        _record_events, _Enqueued(request, event_type, data, timezone.now(), recorded)
    )
    return recorded


def _record_events(enqueued: list[_Enqueued]) -> None:
    """The movements as written now (a movement whose service holds its details is shown
    from them, without reading it again), then the events, at once or with the block's
    others (``events_recorded_together``)."""
    payloads = movement_payloads([item.request for item in enqueued])
    for item in enqueued:
        item.payload = payloads[item.request.pk]
    together = _TOGETHER.get()
    if together is not None:
        together.extend(enqueued)
    else:
        _insert_events(enqueued)


def _insert_events(enqueued: list[_Enqueued]) -> None:
    """The events (numbered per movement after its last one) and their deliveries, each in
    one statement."""
    if not enqueued:
        return
    # A movement's first event (the catalogue's ``request_created``) has no event before it.
    new = {item.request.pk for item in enqueued if item.event_type == FIRST_EVENT_TYPE}
    unread = {item.request.pk for item in enqueued} - new
    sequences = _known_sequences(unread)
    if unread := unread - set(sequences):
        sequences.update(_last_sequences(unread))
    events = []
    for item in enqueued:
        sequence = sequences.get(item.request.pk, 0) + 1
        sequences[item.request.pk] = sequence
        event = Event(
            event_id=uuid.uuid4(),
            request=item.request,
            event_type=item.event_type,
            sequence=sequence,
            occurred_at=item.occurred_at,
        )
        event.body = _body(
            event_id=event.event_id,
            event_type=item.event_type,
            occurred_at=item.occurred_at,
            data={**item.payload, "sequence": sequence},
            context=item.data or {},
        )
        events.append(event)
    Event.objects.bulk_create(events)
    _publish_after_commit()
    active = _active_subscriptions()
    now = timezone.now()
    deliveries: list[Delivery] = []
    for item, event in zip(enqueued, events, strict=True):
        for subscription in active:
            if not _receives(subscription, item.request, item.event_type):
                continue
            delivery = Delivery(
                event_id=event.event_id,
                subscription=subscription,
                request=item.request,
                event_type=item.event_type,
                body=event.body,
                occurred_at=item.occurred_at,
                created_at=now,
                next_attempt_at=now,
                enqueued_at=now,
            )
            deliveries.append(delivery)
            item.recorded.append(delivery)
    if deliveries:
        Delivery.objects.bulk_create(deliveries)
        ids = [d.pk for d in deliveries]
        transaction.on_commit(lambda: _queue(ids))


def events_publish(*, limit: int = 1000) -> int:
    """Give the committed events that have none a feed position, in order; return how many.

    One publisher at a time (the counter row's lock; a second one skips rather than waits),
    so positions become visible in increasing order and a cursor never passes an event that
    is published later. On PostgreSQL in one statement, its own transaction when none is open
    (every worker's result commit publishes: one round trip, not a transaction of two)."""
    if connection.vendor == "postgresql":
        published = _publish_in_one_statement(limit)
        if published is not None:
            return published
        # No counter row was locked: another publisher holds it, or there is none yet.
    with transaction.atomic():
        counter = FeedCounter.objects.select_for_update(skip_locked=True).filter(pk=1).first()
        if counter is None:
            if FeedCounter.objects.filter(pk=1).exists():
                return 0  # another publisher holds it
            counter, _ = FeedCounter.objects.get_or_create(pk=1)
            counter = FeedCounter.objects.select_for_update().get(pk=1)
        events = list(Event.objects.filter(position__isnull=True).order_by("id")[:limit])
        for event in events:
            counter.last_position += 1
            event.position = counter.last_position
        if events:
            Event.objects.bulk_update(events, ["position"])
            counter.save(update_fields=["last_position"])
    return len(events)


# The counter row locked (skipped if another publisher holds it), the events without a
# position numbered after its last one in id order, and the counter moved past them: one
# statement. Its data-modifying parts see one snapshot; the lock is the statement's (or the
# caller's transaction's) until commit, as the ORM's two statements held it.
_PUBLISH = """
WITH counter AS (
    SELECT id, last_position FROM {counter} WHERE id = 1 FOR UPDATE SKIP LOCKED
), numbered AS (
    SELECT waiting.id, counter.last_position + row_number() OVER (ORDER BY waiting.id) AS n
    FROM counter, LATERAL (
        SELECT id FROM {events} WHERE "position" IS NULL ORDER BY id LIMIT %(limit)s
    ) AS waiting
), published AS (
    UPDATE {events} SET "position" = numbered.n
    FROM numbered WHERE {events}.id = numbered.id RETURNING 1
)
UPDATE {counter} SET last_position = counter.last_position + (SELECT count(*) FROM published)
FROM counter WHERE {counter}.id = counter.id
RETURNING (SELECT count(*) FROM published)
"""


def _publish_in_one_statement(limit: int) -> int | None:
    """How many events were published (None: no counter row was locked)."""
    sql = _PUBLISH.format(
        events=connection.ops.quote_name(Event._meta.db_table),
        counter=connection.ops.quote_name(FeedCounter._meta.db_table),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, {"limit": limit})
        row = cursor.fetchone()
    return None if row is None else row[0]


def _publish_after_commit() -> None:
    """Publish once the transaction commits: once per transaction, since one publish gives
    every committed event its position (a worker's batch records many events)."""
    connection = transaction.get_connection()
    # A hook already registered is dropped only by rolling back a savepoint that is still
    # open, i.e. one this event is inside too (released savepoints can no longer roll back):
    # wherever it was asked for, it publishes this event as well, or neither exists.
    if any(func is _publish_quietly for _, func, _ in connection.run_on_commit):
        return
    transaction.on_commit(_publish_quietly)


def _publish_quietly() -> None:
    try:
        events_publish()
    except Exception:
        logger.warning("could not publish events to the feed; the sweep will", exc_info=True)


def deliveries_enqueue_due(*, limit: int = 500) -> int:
    """Queue a delivery task for every PENDING delivery that is due and not already queued
    recently (a task lost with its broker message is queued again); return how many."""
    return outbox.enqueue_due(
        Delivery.objects.filter(
            status=DeliveryStatus.PENDING,
            subscription__is_active=True,
            subscription__deleted_at__isnull=True,
        ),
        task_name=DELIVER_TASK,
        requeue_after=float(_setting("QTG_CALLBACKS_REQUEUE_AFTER_SECONDS")),
        limit=limit,
    )


@dataclass(frozen=True)
class _Claim:
    delivery_id: uuid.UUID
    event_id: uuid.UUID
    number: int
    url: str
    secrets: tuple[str, ...]
    event_type: str
    body: bytes


@dataclass(frozen=True)
class _Outcome:
    ok: bool
    status_code: int | None = None
    error: str = ""
    excerpt: str = ""
    duration_ms: int = 0


def _claim(delivery_id: Any) -> _Claim | None:
    now = timezone.now()
    timeout = float(_setting("QTG_CALLBACKS_TIMEOUT_SECONDS"))
    subscription_id = (
        Delivery.objects.filter(pk=delivery_id).values_list("subscription_id", flat=True).first()
    )
    if subscription_id is None:
        return None
    with transaction.atomic():
        # The subscription's row first (as its own services lock it), then the delivery's.
        Subscription.objects.select_for_update().filter(pk=subscription_id).first()
        delivery = (
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("subscription")
            .filter(
                pk=delivery_id,
                status=DeliveryStatus.PENDING,
                next_attempt_at__lte=now,
                subscription__is_active=True,
                subscription__deleted_at__isnull=True,
            )
            .first()
        )
        if delivery is None:
            return None
        on_the_wire = max(timeout * 2, float(_setting("QTG_CALLBACKS_DEADLINE_SECONDS")))
        # One attempt on the wire per subscription (claims of one subscription take its row's
        # lock in turn): a slow receiver holds one webhook worker at most, and delays only its
        # own deliveries. This one falls due again when that attempt's deadline has passed.
        busy = (
            Delivery.objects.filter(subscription_id=delivery.subscription_id, sending_until__gt=now)
            .exclude(pk=delivery.pk)
            .order_by("sending_until")
            .values_list("sending_until", flat=True)
            .first()
        )
        if busy is not None:
            delivery.next_attempt_at = busy
            delivery.enqueued_at = None
            delivery.save(update_fields=["next_attempt_at", "enqueued_at", "updated_at"])
            return None
        delivery.attempts += 1
        delivery.last_attempt_at = now
        delivery.sending_until = now + timedelta(seconds=on_the_wire)
        # The lease: nobody else picks the row up while this attempt is on the wire; if the
        # worker dies, the delivery simply falls due again.
        delivery.next_attempt_at = now + timedelta(seconds=on_the_wire + 30)
        delivery.save(
            update_fields=[
                "attempts",
                "last_attempt_at",
                "sending_until",
                "next_attempt_at",
                "updated_at",
            ]
        )
        subscription = delivery.subscription
        return _Claim(
            delivery_id=delivery.pk,
            event_id=delivery.event_id,
            number=delivery.attempts,
            url=subscription.url,
            secrets=tuple(subscription.signing_secrets(now)),
            event_type=delivery.event_type,
            body=delivery.body.encode(),
        )


def _post(claim: _Claim) -> _Outcome:
    try:
        target = pin_target_url(claim.url)
    except TargetRefused as exc:
        return _Outcome(ok=False, error=f"target refused: {exc}")
    timeout = float(_setting("QTG_CALLBACKS_TIMEOUT_SECONDS"))
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **signing.headers(
            secrets=claim.secrets, msg_id=str(claim.event_id), timestamp=timestamp, body=claim.body
        ),
        **target.headers,
    }
    started = time.monotonic()
    deadline = Deadline(float(_setting("QTG_CALLBACKS_DEADLINE_SECONDS")))
    try:
        # Redirects are not followed: a redirect could lead past the target check.
        with (
            deadline,
            httpx.Client(
                timeout=httpx.Timeout(timeout), follow_redirects=False, trust_env=False
            ) as client,
            client.stream(
                "POST",
                target.url,
                content=claim.body,
                headers=headers,
                extensions={**target.extensions, "trace": deadline.trace},
            ) as response,
        ):
            excerpt = b""
            for chunk in response.iter_bytes():
                excerpt += chunk
                if len(excerpt) >= RESPONSE_EXCERPT_BYTES:
                    break
            status_code = response.status_code
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}".strip(": ")
        if deadline.expired:
            error = f"no complete answer within the {deadline.seconds:g}s deadline ({error})"
        return _Outcome(ok=False, error=error, duration_ms=int((time.monotonic() - started) * 1000))
    duration_ms = int((time.monotonic() - started) * 1000)
    text = excerpt[:RESPONSE_EXCERPT_BYTES].decode("utf-8", errors="replace")
    ok = 200 <= status_code < 300
    return _Outcome(
        ok=ok,
        status_code=status_code,
        excerpt=text,
        duration_ms=duration_ms,
        error="" if ok else f"HTTP {status_code}",
    )


def _record(claim: _Claim, outcome: _Outcome) -> Delivery | None:
    now = timezone.now()
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().filter(pk=claim.delivery_id).first()
        if delivery is None:
            return None
        DeliveryAttempt.objects.create(
            delivery=delivery,
            number=claim.number,
            url=claim.url,
            started_at=delivery.last_attempt_at or now,
            duration_ms=outcome.duration_ms,
            status_code=outcome.status_code,
            error=outcome.error,
            response_excerpt=outcome.excerpt,
            succeeded=outcome.ok,
        )
        delivery.last_status_code = outcome.status_code
        delivery.last_error = outcome.error
        delivery.enqueued_at = None
        delivery.sending_until = None
        if outcome.ok:
            delivery.status = DeliveryStatus.DELIVERED
            delivery.delivered_at = now
        elif delivery.attempts >= int(_setting("QTG_CALLBACKS_MAX_ATTEMPTS")):
            delivery.status = DeliveryStatus.DEAD
        else:
            delivery.next_attempt_at = now + backoff_delay(delivery.attempts)
        delivery.save(
            update_fields=[
                "last_status_code",
                "last_error",
                "enqueued_at",
                "sending_until",
                "status",
                "delivered_at",
                "next_attempt_at",
                "updated_at",
            ]
        )
        return delivery


def delivery_send(*, delivery_id: Any) -> Delivery | None:
    """Make one attempt at a due delivery; return it, or None when it is not due, already
    being sent, delivered, dead, gone or its subscription is paused."""
    try:
        uuid.UUID(str(delivery_id))
    except ValueError:
        return None
    claim = _claim(delivery_id)
    if claim is None:
        return None
    outcome = _post(claim)
    if not outcome.ok:
        logger.info(
            "callback delivery %s attempt %s failed: %s",
            claim.delivery_id,
            claim.number,
            outcome.error,
        )
    delivery = _record(claim, outcome)
    if delivery is not None:
        delivered = delivery.status == DeliveryStatus.DELIVERED
        instruments.attempt_recorded(
            outcome="delivered"
            if delivered
            else ("dead" if delivery.status == DeliveryStatus.DEAD else "retrying"),
            seconds=outcome.duration_ms / 1000,
            latency_seconds=(delivery.delivered_at - delivery.occurred_at).total_seconds()
            if delivered and delivery.delivered_at
            else None,
        )
    return delivery


@transaction.atomic
def delivery_redeliver(*, delivery: Delivery | Any, actor: Actor) -> Delivery:
    """Queue a DEAD (or already DELIVERED) delivery again with a fresh attempt budget; the
    event id (``webhook-id``) stays the same so receivers can still dedupe. Operators need
    the redeliver permission; an API client may redeliver to its own subscriptions."""
    pk = delivery.pk if isinstance(delivery, Delivery) else delivery
    try:
        delivery = (
            Delivery.objects.select_for_update(of=("self",))
            .select_related("subscription")
            .get(pk=pk)
        )
    except (Delivery.DoesNotExist, ValueError, TypeError, ValidationError):
        raise NotFound(f"delivery {pk} does not exist") from None
    owner_id = delivery.subscription.owner_id
    if not (
        actor.has_perm("callbacks.redeliver_delivery")
        or (owner_id is not None and actor.user is not None and owner_id == actor.user.pk)
    ):
        raise NotPermitted(
            f"{actor} lacks the permission callbacks.redeliver_delivery",
            details={"permission": "callbacks.redeliver_delivery"},
        )
    if delivery.status == DeliveryStatus.PENDING:
        raise ActionRefused(
            "the delivery is still pending: it will be retried on its own",
            details={"current_state": delivery.status},
        )
    now = timezone.now()
    delivery.status = DeliveryStatus.PENDING
    delivery.attempts = 0
    delivery.next_attempt_at = now
    delivery.enqueued_at = now
    delivery.delivered_at = None
    delivery.redelivered_at = now
    delivery.redelivered_by = str(actor)
    delivery.save(
        update_fields=[
            "status",
            "attempts",
            "next_attempt_at",
            "enqueued_at",
            "delivered_at",
            "redelivered_at",
            "redelivered_by",
            "updated_at",
        ]
    )
    transaction.on_commit(lambda: _queue([delivery.pk]))
    return delivery


def subscription_record(subscription: Subscription, *, action: str, actor: Any) -> None:
    """Record a subscription change in the evidence chain (never its secrets)."""
    record_decision(
        subject=subscription,
        action=action,
        actor=actor,
        detail={
            "url": subscription.url,
            "event_types": list(subscription.event_types or []),
            "is_active": subscription.is_active,
            "owner": subscription.owner_id,
            "deleted_at": subscription.deleted_at,
        },
    )


@transaction.atomic
def subscription_save(*, subscription: Subscription, actor: Any) -> Subscription:
    """Create or change a subscription (validated by the caller's form or serializer), with
    its audit record in the same transaction."""
    action = "created" if subscription._state.adding else "changed"
    subscription.save()
    subscription_record(subscription, action=action, actor=actor)
    return subscription


@transaction.atomic
def subscription_rotate_secret(
    *,
    subscription: Subscription,
    actor: Any,
    overlap: timedelta | None = None,
    secret: str = "",
) -> str:
    """Give the subscription a new secret (``secret`` when the operator chose one) and return
    it (the only time it is shown); the old one keeps signing next to it for ``overlap``
    (default QTG_WEBHOOK_SECRET_OVERLAP_SECONDS), so the receiver can switch without a gap.
    Recorded as ``actor``'s."""
    if overlap is None:
        overlap = timedelta(seconds=float(_setting("QTG_WEBHOOK_SECRET_OVERLAP_SECONDS")))
    subscription = Subscription.objects.select_for_update().get(pk=subscription.pk)
    secret = secret or signing.new_secret()
    subscription.previous_secret = subscription.secret if overlap > timedelta(0) else ""
    subscription.previous_secret_expires_at = (
        timezone.now() + overlap if overlap > timedelta(0) else None
    )
    subscription.secret = secret
    subscription.save(
        update_fields=["secret", "previous_secret", "previous_secret_expires_at", "updated_at"]
    )
    subscription_record(subscription, action="secret_rotated", actor=actor)
    return secret


@transaction.atomic
def subscription_delete(*, subscription: Subscription, actor: Any) -> Subscription:
    """Stop sending to the subscription for good (``deleted_at``), recorded as ``actor``'s. The
    row stays: its deliveries and the records of its changes name it."""
    subscription = Subscription.objects.select_for_update().get(pk=subscription.pk)
    if subscription.deleted_at is None:
        subscription.is_active = False
        subscription.deleted_at = timezone.now()
        subscription.save(update_fields=["is_active", "deleted_at", "updated_at"])
        subscription_record(subscription, action="deleted", actor=actor)
    return subscription


@transaction.atomic
def subscription_send_test(*, subscription: Subscription) -> Delivery:
    """Send the subscription a test event (signed and delivered like any other, whatever
    event types it asked for)."""
    now = timezone.now()
    event_id = uuid.uuid4()
    delivery = Delivery.objects.create(
        event_id=event_id,
        subscription=subscription,
        request=None,
        event_type=TEST_EVENT_TYPE,
        body=_body(
            event_id=event_id,
            event_type=TEST_EVENT_TYPE,
            occurred_at=now,
            data={"subscription_id": str(subscription.pk), "sequence": 0},
            context={},
        ),
        occurred_at=now,
        created_at=now,
        next_attempt_at=now,
        enqueued_at=now,
    )
    transaction.on_commit(lambda: _queue([delivery.pk]))
    return delivery


AUDIT_CHECKPOINT = "audit.checkpoint"


@transaction.atomic
def audit_checkpoint_enqueue(*, checkpoint: dict[str, Any]) -> list[Delivery]:
    """A delivery of the signed audit checkpoint (``data``: the checkpoint as written to the
    file) for every operator subscription that asks for ``audit.checkpoint``; not about one
    movement, so not in the movement feed. Clients' subscriptions never receive it."""
    subscriptions = [
        s
        for s in Subscription.objects.filter(
            is_active=True, deleted_at__isnull=True, owner__isnull=True
        )
        if s.wants(AUDIT_CHECKPOINT)
    ]
    if not subscriptions:
        return []
    now = timezone.now()
    event_id = uuid.uuid4()
    body = _body(
        event_id=event_id, event_type=AUDIT_CHECKPOINT, occurred_at=now, data=checkpoint, context={}
    )
    deliveries = Delivery.objects.bulk_create(
        [
            Delivery(
                event_id=event_id,
                subscription=subscription,
                request=None,
                event_type=AUDIT_CHECKPOINT,
                body=body,
                occurred_at=now,
                created_at=now,
                next_attempt_at=now,
                enqueued_at=now,
            )
            for subscription in subscriptions
        ]
    )
    ids = [d.pk for d in deliveries]
    transaction.on_commit(lambda: _queue(ids))
    return deliveries

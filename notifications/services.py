"""Notifications of the people who can act: a movement waiting for their approval, one in
MANUAL_INTERVENTION, one that needs attention, an override proposal they may confirm.

``notify`` (the seam movements calls, ``movements.ports.notify``) runs in the transaction of the
event: it asks the console's own rules (``available_actions``, the override policy) who can act
on it now — never its creator for an approval, never the person who caused it — and writes a
``Notification`` row per person whose preference is not *off*, and one for the chat webhook
when ``QTG_NOTIFY_CHAT_WEBHOOK_URL`` is set. Nothing is sent from the request: the rows are the
outbox (``qtg.core.outbox``, shared with the webhook deliveries), each immediate row is sent by
the ``notifications.send`` task once the event commits, retried with backoff, DEAD after
``QTG_NOTIFY_MAX_ATTEMPTS``; the sweep queues again what is due and was lost. Rows a person
wants in the digest wait for ``digests_send`` (periodic), which writes one email per person
summing up what they can still act on and drops the rest.

Preferences are a person's own setting and are not in the audit chain: they decide only
whether that person's inbox is told, never what anyone may do nor what happens to money; the
console's queue and the chat channel show the same work whatever they choose.
"""

import json
import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from movements import policies, selectors
from movements.admin.actions import Situation, available_actions
from movements.models import MovementRequest, OverrideProposal
from movements.policies import Action
from movements.public import after_writes
from notifications.models import (
    PREFERENCE_KINDS,
    Channel,
    Kind,
    Mode,
    Notification,
    NotificationPreference,
    Status,
)
from qtg.core import money, outbox
from qtg.core.actors import Actor
from qtg.core.compiled import Compiled

logger = logging.getLogger(__name__)

SEND_TASK = "notifications.send"
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"

# Who may be able to act on each kind (a first cut by permission; the console's rules decide).
KIND_PERMISSIONS: dict[str, tuple[str, ...]] = {
    Kind.APPROVAL_WAITING: (policies.PERMISSIONS[Action.APPROVE],),
    Kind.MANUAL_INTERVENTION: tuple(
        policies.PERMISSIONS[a]
        for a in (
            Action.RESOLVE_UNKNOWN,
            Action.INTERVENTION_RESUME,
            Action.INTERVENTION_RETRY,
            Action.FORCE_COMPLETE,
            Action.FORCE_FAIL,
        )
    ),
    Kind.ATTENTION: (policies.PERMISSIONS[Action.RESOLVE_ATTENTION],),
    Kind.OVERRIDE_PROPOSAL: (policies.CONFIRM_OVERRIDE_PERMISSION,),
}
# The console actions that make a movement's kind something the person can act on.
KIND_ACTIONS: dict[str, set[str]] = {
    Kind.APPROVAL_WAITING: {Action.APPROVE},
    Kind.MANUAL_INTERVENTION: {
        Action.RESOLVE_UNKNOWN,
        Action.INTERVENTION_RESUME,
        Action.INTERVENTION_RETRY,
        Action.FORCE_COMPLETE,
        Action.FORCE_FAIL,
    },
    Kind.ATTENTION: {Action.SNOOZE_ATTENTION, Action.RESOLVE_ATTENTION, Action.STOP_WATCHING},
}


# --- who is told ---------------------------------------------------------------------------


def _recipients(kind: str):
    """Active staff with an email holding a permission the kind needs (superusers included),
    each with their preference (``notification_preference``, joined: None without a row)
    and groups (prefetched, for ``can_act``)."""
    people = None
    for perm in KIND_PERMISSIONS[kind]:
        holding = get_user_model().objects.with_perm(
            perm, is_active=True, include_superusers=True, backend=MODEL_BACKEND
        )
        people = holding if people is None else people | holding
    return (
        people.filter(is_staff=True, is_active=True)
        .exclude(email="")
        .select_related("notification_preference")
        .prefetch_related("groups")
        .order_by("pk")
    )


# Every create and approve asks who to tell (``qtg.core.compiled``): one statement for the
# people and their preferences, one for their groups.
_RECIPIENTS = Compiled(_recipients)


def can_act(
    kind: str,
    user: Any,
    *,
    movement: MovementRequest | None,
    proposal: OverrideProposal | None = None,
    now: datetime | None = None,
) -> bool:
    """Whether ``user`` can act on the event now, by the console's own rules: the proposal's
    confirmation policy, or an action of the kind offered on the movement (``movement`` read
    with ``movements.selectors.with_decision_facts``)."""
    now = now or timezone.now()
    actor = Actor.for_user(user)
    if kind == Kind.OVERRIDE_PROPOSAL:
        return (
            proposal is not None
            and policies.override_confirm_refusal(actor=actor, proposal=proposal, now=now) is None
        )
    if movement is None:
        return False
    # The person's groups as read with them (``_recipients``), else from the database.
    groups = tuple(sorted(group.name for group in user.groups.all()))
    offered = available_actions(Situation.of(movement, movement.live_nodes, user, groups=groups))
    return bool({action.name for action in offered} & KIND_ACTIONS[kind])


def _mode(user: Any, kind: str) -> str:
    """How ``user`` (read by ``_recipients``) wants ``kind`` told: at once without a row."""
    try:
        preference = user.notification_preference
    except NotificationPreference.DoesNotExist:
        return Mode.IMMEDIATE
    return preference.mode(kind)


# --- what is said --------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    subject: str
    body: str
    url: str


def console_url(path: str) -> str:
    return settings.QTG_CONSOLE_URL.rstrip("/") + path


def _message(
    kind: str, movement: MovementRequest, proposal: OverrideProposal | None, detail: dict
) -> Message:
    amount = f"{money.format_amount(movement.amount, grouping=True)} {movement.asset}"
    route = f"{movement.source} → {movement.destination} ({movement.template_key})"
    if kind == Kind.OVERRIDE_PROPOSAL and proposal is not None:
        url = console_url(reverse("admin:movements_overrideproposal_confirm", args=[proposal.pk]))
        subject = (
            f"QTG: {proposal.get_action_display()} of {movement.short_id} awaits your confirmation"
        )
        lines = [
            f"{proposal.proposed_by} proposes: {proposal.get_action_display()}.",
            f"Their reason: {proposal.reason}",
            f"It expires at {proposal.expires_at:%Y-%m-%d %H:%M} UTC.",
        ]
    else:
        url = console_url(reverse("admin:movements_movementrequest_change", args=[movement.pk]))
        what = {
            Kind.APPROVAL_WAITING: "waits for your approval",
            Kind.MANUAL_INTERVENTION: "is in MANUAL_INTERVENTION",
            Kind.ATTENTION: "needs attention",
        }[kind]
        subject = f"QTG: movement {movement.short_id} {what} ({amount})"
        lines = [f"Movement {movement.short_id} {what}."]
        if kind == Kind.ATTENTION:
            lines.append(f"{detail.get('node_key') or 'The movement'}: {detail.get('message')}")
        elif movement.failure_reason:
            lines.append(f"Reason: {movement.failure_reason}")
        if kind == Kind.APPROVAL_WAITING and movement.approvals_required > 1:
            lines.append(f"It needs {movement.approvals_required} approvers.")
    body = "\n".join([*lines, "", f"{amount}, {route}", "", f"Open it: {url}", ""])
    return Message(subject=subject[:200], body=body, url=url)


# --- the outbox rows -----------------------------------------------------------------------


def notify(
    *,
    kind: str,
    request: MovementRequest,
    actor: Actor,
    proposal: OverrideProposal | None = None,
    detail: dict | None = None,
) -> None:
    """Record the notifications of an event in the caller's transaction (once the movement
    rows written so far are in the database, in a worker's write batch)."""
    after_writes(
        lambda: _record(
            kind=kind,
            request_id=request.pk,
            held=request,
            actor=actor,
            proposal=proposal,
            detail=detail or {},
        )
    )


def _record(
    *,
    kind: str,
    request_id: Any,
    actor: Actor,
    proposal: OverrideProposal | None,
    detail: dict,
    held: MovementRequest | None = None,
) -> list[Notification]:
    movement = _just_created(held) or (
        selectors.with_decision_facts(MovementRequest.objects.filter(pk=request_id)).first()
    )
    if movement is None:
        return []
    now = timezone.now()
    people = [
        user
        for user in _RECIPIENTS(kind)
        if (actor.user is None or user.pk != actor.user.pk)
        and can_act(kind, user, movement=movement, proposal=proposal, now=now)
    ]
    message = _message(kind, movement, proposal, detail)
    # What every notification of the event says, whoever it goes to.
    said = {
        "kind": kind,
        "request": movement,
        "proposal": proposal,
        "subject": message.subject,
        "body": message.body,
        "url": message.url,
        "created_at": now,
        "next_attempt_at": now,
    }
    rows = [
        Notification(
            channel=Channel.EMAIL,
            mode=_mode(user, kind),
            recipient=user,
            address=user.email,
            **said,
        )
        for user in people
        if _mode(user, kind) != Mode.OFF
    ]
    if settings.QTG_NOTIFY_CHAT_WEBHOOK_URL:
        rows.append(
            Notification(channel=Channel.CHAT, address=settings.QTG_NOTIFY_CHAT_WEBHOOK_URL, **said)
        )
    Notification.objects.bulk_create(rows)
    outbox.queue_after_commit(SEND_TASK, [r.pk for r in rows if r.mode == Mode.IMMEDIATE])
    return rows


def _just_created(held: MovementRequest | None) -> MovementRequest | None:
    """A movement its create holds with the rows it wrote (``created_nodes``: nothing approved,
    no attention yet) carries the facts the policies decide on without a read: the create's
    answer is built from the same rows (issue 34)."""
    nodes = getattr(held, "created_nodes", None)
    if nodes is None:
        return None
    held.live_nodes = nodes
    held.open_attentions_list = []
    held.valid_approvals_list = []
    return held


def notifications_enqueue_due(*, limit: int = 500) -> int:
    """Queue a send task for every immediate notification due and not queued recently."""
    return outbox.enqueue_due(
        Notification.objects.filter(status=Status.PENDING, mode=Mode.IMMEDIATE),
        task_name=SEND_TASK,
        requeue_after=settings.QTG_NOTIFY_REQUEUE_AFTER_SECONDS,
        limit=limit,
    )


# --- sending -------------------------------------------------------------------------------


def _claim(notification_id: Any) -> Notification | None:
    now = timezone.now()
    with transaction.atomic():
        row = (
            Notification.objects.select_for_update(skip_locked=True)
            .filter(
                pk=notification_id,
                status=Status.PENDING,
                mode=Mode.IMMEDIATE,
                next_attempt_at__lte=now,
            )
            .first()
        )
        if row is None:
            return None
        row.attempts += 1
        row.last_attempt_at = now
        # The lease: nobody else sends it meanwhile; if the worker dies it falls due again.
        row.next_attempt_at = now + timedelta(seconds=settings.QTG_NOTIFY_TIMEOUT_SECONDS * 2 + 30)
        row.save(update_fields=["attempts", "last_attempt_at", "next_attempt_at"])
        return row


def _deliver(row: Notification) -> str:
    """Send ``row``; the error, or "" when it went out."""
    try:
        if row.channel == Channel.CHAT:
            response = httpx.post(
                row.address,
                content=json.dumps(
                    {
                        "text": f"{row.subject}\n{row.url}",
                        "kind": row.kind,
                        "movement": str(row.request_id) if row.request_id else None,
                        "url": row.url,
                    }
                ),
                headers={"Content-Type": "application/json"},
                timeout=settings.QTG_NOTIFY_TIMEOUT_SECONDS,
                follow_redirects=False,
                trust_env=False,
            )
            return "" if 200 <= response.status_code < 300 else f"HTTP {response.status_code}"
        EmailMessage(
            subject=row.subject,
            body=row.body,
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=[row.address],
        ).send()
        return ""
    except Exception as exc:  # every failure of the outside world is retried, then DEAD
        return f"{type(exc).__name__}: {exc}".strip(": ")


def notification_send(*, notification_id: Any) -> Notification | None:
    """Make one attempt at an immediate notification that is due; None when it is not due,
    already being sent, sent, dead or gone."""
    row = _claim(notification_id)
    if row is None:
        return None
    error = _deliver(row)
    now = timezone.now()
    with transaction.atomic():
        row = Notification.objects.select_for_update().filter(pk=row.pk).first()
        if row is None:
            return None
        row.last_error = error
        row.enqueued_at = None
        if not error:
            row.status, row.sent_at = Status.SENT, now
        elif row.attempts >= settings.QTG_NOTIFY_MAX_ATTEMPTS:
            row.status = Status.DEAD
        else:
            row.next_attempt_at = now + outbox.backoff_delay(
                row.attempts,
                base=settings.QTG_NOTIFY_BACKOFF_SECONDS,
                cap=settings.QTG_NOTIFY_BACKOFF_MAX_SECONDS,
            )
        if error:
            logger.info("notification %s attempt %s failed: %s", row.pk, row.attempts, error)
        row.save(
            update_fields=["last_error", "enqueued_at", "status", "sent_at", "next_attempt_at"]
        )
    return row


# --- the digest ----------------------------------------------------------------------------


def digests_send(*, now: datetime | None = None) -> int:
    """One email per person summing up their waiting digest notifications: only what they
    can still act on (the rest is DROPPED); return how many digests were written."""
    now = now or timezone.now()
    written = []
    with transaction.atomic():
        waiting = list(
            Notification.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(mode=Mode.DIGEST, status=Status.PENDING)
            .select_related("recipient", "proposal")
            .order_by("recipient_id", "created_at")
        )
        movements = {
            m.pk: m
            for m in selectors.with_decision_facts(
                MovementRequest.objects.filter(pk__in={row.request_id for row in waiting})
            )
        }
        by_person: dict[Any, list[Notification]] = defaultdict(list)
        dropped = []
        for row in waiting:
            if row.recipient is not None and can_act(
                row.kind,
                row.recipient,
                movement=movements.get(row.request_id),
                proposal=row.proposal,
                now=now,
            ):
                by_person[row.recipient_id].append(row)
            else:
                dropped.append(row.pk)
        Notification.objects.filter(pk__in=dropped).update(status=Status.DROPPED)
        for rows in by_person.values():
            person = rows[0].recipient
            labels = dict(Kind.choices)
            body = [f"{len(rows)} thing(s) in QTG wait for you:", ""]
            for row in rows:
                body += [f"- {labels[row.kind]}: {row.subject}", f"  {row.url}"]
            digest = Notification.objects.create(
                kind=Kind.DIGEST,
                channel=Channel.EMAIL,
                recipient=person,
                address=person.email,
                subject=f"QTG digest: {len(rows)} thing(s) wait for you",
                body="\n".join([*body, ""]),
                url=console_url(reverse("admin:index")),
                created_at=now,
                next_attempt_at=now,
            )
            Notification.objects.filter(pk__in=[r.pk for r in rows]).update(
                status=Status.IN_DIGEST, digest=digest, sent_at=now
            )
            written.append(digest.pk)
        outbox.queue_after_commit(SEND_TASK, written)
    return len(written)


# --- preferences ---------------------------------------------------------------------------


def preferences_of(user: Any) -> dict[str, str]:
    """Each kind's mode for ``user`` (at once, unless they chose otherwise)."""
    preference = NotificationPreference.objects.filter(user=user).first()
    return {
        kind.value: preference.mode(kind) if preference else Mode.IMMEDIATE
        for kind in PREFERENCE_KINDS
    }


@transaction.atomic
def preferences_set(*, user: Any, modes: dict[str, str]) -> NotificationPreference:
    """Set ``user``'s own mode per kind (kinds not named keep theirs). Not audited: see the
    module's docstring."""
    unknown = set(modes) - {k.value for k in PREFERENCE_KINDS}
    bad = {k: v for k, v in modes.items() if v not in Mode.values}
    if unknown or bad:
        raise ValueError(f"unknown kinds {sorted(unknown)} or modes {bad}")
    preference, _ = NotificationPreference.objects.select_for_update().get_or_create(user=user)
    for kind, mode in modes.items():
        setattr(preference, kind, mode)
    preference.save()
    return preference

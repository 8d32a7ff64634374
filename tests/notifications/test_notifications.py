"""Notifications: the people who can act on an event are told, through the outbox (a row
written in the event's transaction, sent by the worker), as their preferences say."""

from datetime import timedelta

import pytest
from django.core import mail
from django.db import transaction
from django.utils import timezone

from movements.models import OverrideAction
from movements.services import movement_approve
from movements.services.attention import detect_stuck_nodes
from movements.services.overrides import override_propose
from notifications.models import Kind, Mode, Notification, Status
from notifications.services import (
    digests_send,
    notification_send,
    notifications_enqueue_due,
    preferences_set,
)
from qtg.core.actors import Actor
from tests.admin.conftest import TO_COMPLETED, drive

pytestmark = pytest.mark.django_db


def told(kind: str) -> set[str]:
    """Who got an email of ``kind``, by user name."""
    rows = Notification.objects.filter(kind=kind, channel="email").select_related("recipient")
    return {row.recipient.username for row in rows}


def inbox() -> dict[str, list[str]]:
    """The emails sent (Django's locmem outbox): address -> subjects."""
    sent: dict[str, list[str]] = {}
    for message in mail.outbox:
        for address in message.to:
            sent.setdefault(address.split("@")[0], []).append(message.subject)
    return sent


def test_an_approval_waiting_is_written_with_the_movement_and_sent_by_the_worker(
    people, make_movement, eager_tasks, django_capture_on_commit_callbacks
):
    # given the movement is created by the operator; while its transaction is open
    with (
        django_capture_on_commit_callbacks(execute=False) as after_commit,
        transaction.atomic(),
    ):
        movement = make_movement(amount="2500.00")
        # then the notifications are rows of the same transaction, and nothing is sent yet
        assert told(Kind.APPROVAL_WAITING) == {"ann", "sam", "sue"}
        assert mail.outbox == []
    assert mail.outbox == []

    # when it commits and the worker runs the queued tasks
    for callback in after_commit:
        callback()

    # then each eligible approver got one email naming the movement, with the link to act
    assert {name: len(subjects) for name, subjects in inbox().items()} == {
        "ann": 1,
        "sam": 1,
        "sue": 1,
    }
    email = next(m for m in mail.outbox if m.to == ["ann@example.test"])
    assert movement.short_id in email.subject and "waits for your approval" in email.subject
    assert f"https://qtg.example.test/admin/movements/movementrequest/{movement.pk}/" in email.body
    assert "2,500 USDC" in email.body
    assert set(Notification.objects.values_list("status", flat=True)) == {Status.SENT}


def test_a_rolled_back_event_sends_nothing(people, make_movement, eager_tasks):
    with pytest.raises(RuntimeError), transaction.atomic():
        make_movement(amount="10.00")
        raise RuntimeError("the request failed after the movement was written")

    assert Notification.objects.count() == 0
    assert mail.outbox == []


def test_nobody_is_told_of_what_they_cannot_act_on(people, make_movement, eager_tasks, commit):
    # when the operator creates a movement awaiting approval
    with commit():
        make_movement(amount="50.00")

    # then neither its creator (four-eyes), the viewer nor the security admin is told
    assert set(inbox()) == {"ann", "sam", "sue"}


def test_a_person_without_an_email_address_is_not_told(people, make_movement, eager_tasks):
    people["ann"].email = ""
    people["ann"].save(update_fields=["email"])

    make_movement(amount="50.00")

    assert "ann" not in told(Kind.APPROVAL_WAITING)


def test_manual_intervention_is_told_to_supervisors_only(
    people, intervention_failed, eager_tasks, commit
):
    with commit():
        movement = intervention_failed(amount="640.00")

    assert told(Kind.MANUAL_INTERVENTION) == {"sam", "sue"}
    subjects = [s for name in ("sam", "sue") for s in inbox()[name] if "MANUAL" in s]
    assert len(subjects) == 2 and movement.short_id in subjects[0]


def test_an_attention_is_told_to_those_who_handle_it(people, executing):
    movement = drive(executing(amount="12.00"), "withdraw", *TO_COMPLETED)
    drive(movement, "withdraw_observe", "OBSERVING", "COMPLETED")
    drive(movement, "deposit_observe", "OBSERVING")

    assert detect_stuck_nodes(now=timezone.now() + timedelta(days=1)) == 1

    assert told(Kind.ATTENTION) == {"sam", "sue"}
    row = Notification.objects.get(kind=Kind.ATTENTION, recipient=people["sam"])
    assert "deposit_observe" in row.body


def test_an_override_proposal_is_told_to_the_other_supervisors_not_its_proposer(
    people, intervention_failed, eager_tasks, settings, commit
):
    settings.QTG_TWO_PERSON_OVERRIDES = True
    movement = intervention_failed(amount="640.00")

    with commit():
        proposal = override_propose(
            request=movement,
            action=OverrideAction.FORCE_FAIL,
            actor=Actor.for_user(people["sue"]),
            reason="the exchange returned the withdrawal",
        )

    assert told(Kind.OVERRIDE_PROPOSAL) == {"sam"}
    (email,) = mail.outbox
    assert email.to == ["sam@example.test"]
    assert f"/admin/movements/overrideproposal/{proposal.pk}/confirm/" in email.body
    assert "the exchange returned the withdrawal" in email.body


def test_off_tells_nothing_and_digest_waits_for_the_digest(
    people, make_movement, eager_tasks, commit
):
    preferences_set(user=people["ann"], modes={Kind.APPROVAL_WAITING: Mode.OFF})
    preferences_set(user=people["sam"], modes={Kind.APPROVAL_WAITING: Mode.DIGEST})

    with commit():
        make_movement(amount="10.00")
        make_movement(amount="20.00")

    # ann chose never, sam the digest: only sue was emailed at once
    assert set(inbox()) == {"sue"}
    assert "ann" not in told(Kind.APPROVAL_WAITING)
    assert Notification.objects.filter(recipient=people["sam"], status=Status.PENDING).count() == 2

    # when the digest runs: one email to sam summing up both
    mail.outbox.clear()
    with commit():
        assert digests_send() == 1

    (digest,) = mail.outbox
    assert digest.to == ["sam@example.test"]
    assert "2 thing(s)" in digest.subject
    assert digest.body.count("/admin/movements/movementrequest/") == 2
    assert set(
        Notification.objects.filter(
            kind=Kind.APPROVAL_WAITING, recipient=people["sam"]
        ).values_list("status", flat=True)
    ) == {Status.IN_DIGEST}
    # and the next digest has nothing to say
    assert digests_send() == 0


def test_the_digest_leaves_out_what_was_handled_meanwhile(
    people, make_movement, eager_tasks, commit
):
    preferences_set(user=people["sam"], modes={Kind.APPROVAL_WAITING: Mode.DIGEST})
    handled = make_movement(amount="10.00")
    waiting = make_movement(amount="20.00")
    movement_approve(request=handled, actor=Actor.for_user(people["ann"]))

    with commit():
        digests_send()

    (digest,) = mail.outbox
    assert waiting.short_id in digest.body and handled.short_id not in digest.body
    dropped = Notification.objects.get(request=handled, recipient=people["sam"])
    assert dropped.status == Status.DROPPED


def test_the_chat_webhook_gets_each_event_as_json(
    people, make_movement, eager_tasks, receiver, settings, commit
):
    settings.QTG_NOTIFY_CHAT_WEBHOOK_URL = receiver.url

    with commit():
        movement = make_movement(amount="75.25")

    (post,) = receiver.received
    assert post.json["kind"] == "approval_waiting"
    assert post.json["movement"] == str(movement.pk)
    assert movement.short_id in post.json["text"] and "75.25 USDC" in post.json["text"]
    assert Notification.objects.get(channel="chat").status == Status.SENT


def test_a_failing_chat_is_retried_then_dead(people, make_movement, receiver, settings):
    # given a chat that answers 500 (no eager tasks: the test plays the worker)
    settings.QTG_NOTIFY_CHAT_WEBHOOK_URL = receiver.url
    receiver.answer(500, 500, 500)
    make_movement(amount="75.25")
    row = Notification.objects.get(channel="chat")

    # when the worker tries, the sweep queues it again, and the worker tries again
    first = notification_send(notification_id=row.pk)
    assert (first.status, first.attempts, first.last_error) == (Status.PENDING, 1, "HTTP 500")
    assert notifications_enqueue_due() >= 1
    notification_send(notification_id=row.pk)
    last = notification_send(notification_id=row.pk)

    # then after the allowed attempts it is DEAD, every attempt having reached the chat
    assert (last.status, last.attempts) == (Status.DEAD, 3)
    assert len(receiver.received) == 3
    assert notification_send(notification_id=row.pk) is None


def test_the_tasks_keep_their_names_and_sending_runs_on_the_outbound_queue(settings):
    from qtg.celery import app
    from qtg.queues import task_routes

    assert {"notifications.send", "notifications.send_due", "notifications.digest"} <= set(
        app.tasks
    )
    assert task_routes("q")["notifications.send"] == {"queue": "q.webhooks"}
    beat = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"notifications.send_due", "notifications.digest"} <= beat

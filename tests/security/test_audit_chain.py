"""The audit trail can be proved (issue 28): every evidence row is linked into its stream's
chain with an HMAC under a key outside the database, signed checkpoints outside the database
count what was there, and ``audit_verify`` names every tampering the issue lists: links
recomputed without the key, the newest rows deleted, a table truncated, hashes blanked, a
movement's events deleted, a chain-transaction event's evidence edited.

Tampering is played as the database owner would (on PostgreSQL, with the triggers bypassed
through ``session_replication_role``, which only an owner or superuser can set)."""

import hashlib
import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.utils import IntegrityError

from movements.audit import movement_chain_status
from movements.models import AuditRecord, MovementApproval, MovementEvent
from movements.services import movement_approve
from movements.services.state import batch
from movements.services.writers import make_row_writer, use_row_writer
from ops.audit import audit_checkpoint
from qtg.core.actors import Actor
from qtg.core.audit_keys import HmacKeyring, use_audit_key
from qtg.core.chain import chained_models, link_message, link_problem
from qtg.core.checkpoints import checkpoint_write, read_checkpoints, verify_all, verify_recent
from reservations.models import ReservationEvent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def checkpoint_file(settings, tmp_path):
    settings.QTG_AUDIT_CHECKPOINT_FILE = str(tmp_path / "checkpoints.jsonl")
    return tmp_path / "checkpoints.jsonl"


def tamper(sql: str, params=(), model=MovementEvent) -> None:
    """What the owner of the database can do: any statement, the triggers bypassed."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(sql.format(table=model._meta.db_table), params)


def db(value):
    """A primary key as a raw statement takes it (SQLite stores UUIDs as hex)."""
    return MovementEvent._meta.get_field("request").get_db_prep_value(value, connection)


def events(movement) -> list[MovementEvent]:
    return list(MovementEvent.objects.filter(request=movement).order_by("pk"))


def verify(*args) -> str:
    out = StringIO()
    call_command("audit_verify", *args, stdout=out)
    return out.getvalue()


def breaks(*args) -> str:
    out = StringIO()
    with pytest.raises(CommandError, match="break"):
        call_command("audit_verify", *args, stdout=out)
    return out.getvalue()


# --- links -------------------------------------------------------------------------------------


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("name", ["orm", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_every_writer_links_every_event_with_the_key(make_movement, name, deferred):
    previous = use_row_writer(make_row_writer(name))
    try:
        movement = make_movement()
        with transaction.atomic(), batch() if deferred else transaction.atomic():
            movement_approve(request=movement, actor=Actor.system("tests-approver"))
    finally:
        use_row_writer(previous)

    rows = events(movement)
    assert len(rows) >= 3
    assert {row.chain_key for row in rows} == {"embedded"}
    assert all(link_problem(row) is None for row in rows)
    assert rows[0].chain_prev == "" and rows[1].chain_prev == rows[0].chain_hash


def test_an_intact_trail_verifies_against_its_checkpoint(make_movement):
    make_movement(approve=True)
    checkpoint_write(reason="test")

    assert "audit chain intact" in verify()
    assert "against checkpoint #1" in verify()


def test_links_recomputed_without_the_key_are_named(make_movement):
    # given an event that names a different actor, every link of the movement recomputed as
    # the old chain did (SHA-256, no key): what issue 28 saw pass as "intact"
    movement = make_movement(approve=True)
    rows = events(movement)
    rows[1].actor_id = "someone-else"
    previous = ""
    for row in rows:
        row.chain_prev = previous
        row.chain_hash = hashlib.sha256(link_message(row, previous)).hexdigest()
        previous = row.chain_hash
        tamper(
            "UPDATE {table} SET actor_id = %s, chain_prev = %s, chain_hash = %s WHERE id = %s",
            [row.actor_id, row.chain_prev, row.chain_hash, row.pk],
        )

    out = breaks()

    assert f"movements.movementevent stream {movement.pk} row {rows[1].pk}: its content" in out


def test_an_edited_event_is_named_as_broken_on_the_movement_page(make_movement):
    movement = make_movement(approve=True)
    edited = events(movement)[2]
    tamper("UPDATE {table} SET actor_id = 'someone-else' WHERE id = %s", [edited.pk])

    assert movement_chain_status(movement.pk).startswith(f"broken at movementevent {edited.pk}")
    assert f"row {edited.pk}" in breaks("--movement", str(movement.pk))


def test_the_movement_page_says_verified_when_intact(make_movement):
    movement = make_movement(approve=True)

    assert movement_chain_status(movement.pk).startswith("verified (")


def test_a_deleted_event_in_the_middle_leaves_its_successor_without_predecessor(make_movement):
    movement = make_movement(approve=True)
    first, second, *_ = events(movement)
    tamper("DELETE FROM {table} WHERE id = %s", [first.pk])

    assert f"row {second.pk}: its predecessor is missing" in breaks()


def test_the_newest_events_deleted_are_counted_by_the_checkpoint(make_movement):
    movement = make_movement(approve=True)
    checkpoint_write(reason="test")
    newest = events(movement)[-2:]
    tamper("DELETE FROM {table} WHERE id IN (%s, %s)", [newest[0].pk, newest[1].pk])

    out = breaks()

    assert f"movements.movementevent stream {movement.pk}: 2 checkpointed row(s) deleted" in out


def test_every_event_of_a_movement_deleted_is_named(make_movement):
    movement = make_movement(approve=True)
    other = make_movement(approve=True)
    checkpoint_write(reason="test")
    count = len(events(movement))
    tamper("DELETE FROM {table} WHERE request_id = %s", [db(movement.pk)])

    out = breaks()

    assert (
        f"movements.movementevent stream {movement.pk}: all {count} checkpointed row(s) are gone"
        in out
    )
    assert f"stream {other.pk}" not in out


def test_a_truncated_table_is_named(make_movement):
    make_movement(approve=True)
    checkpoint_write(reason="test")
    # TRUNCATE itself is refused on PostgreSQL (below); the owner bypassing that:
    tamper("DELETE FROM {table}", model=ReservationEvent)

    assert "reservations.reservationevent stream *" in (out := breaks())
    assert "the table was emptied (TRUNCATE?)" in out


def test_blanked_links_relabelled_legacy_are_named(make_movement):
    # given every event's link blanked and marked as if written before links were keyed
    movement = make_movement(approve=True)
    checkpoint_write(reason="test")
    rows = events(movement)
    tamper(
        "UPDATE {table} SET chain_hash = '', chain_prev = '', chain_key = 'legacy', "
        "actor_id = 'someone-else' WHERE request_id = %s",
        [db(movement.pk)],
    )

    out = breaks()

    assert f"row {rows[0].pk}: marked legacy but written after the migration" in out


def test_a_keyed_row_without_a_link_is_refused_by_the_database(make_movement):
    movement = make_movement(approve=True)
    row = events(movement)[0]

    with pytest.raises(IntegrityError):
        tamper("UPDATE {table} SET chain_hash = '' WHERE id = %s", [row.pk])


def test_a_chain_transaction_event_names_its_worker_and_its_edited_evidence_is_named(db):
    from qtg.core.actors import acting_for
    from venues.models import ChainTransactionEvent
    from venues.transactions import chain_transaction_create

    # given a venue record written during a worker's venue call
    with acting_for("worker:host:1:abc#epoch3/attempt2"):
        tx = chain_transaction_create(
            chain="anvil",
            sender="0x" + "ab" * 20,
            nonce=0,
            unsigned={"to": "0x" + "cd" * 20, "value": 1},
            actor=Actor.system("venues.evm"),
            family="evm",
            evidence={"block_hash": "0xabc"},
        )
    event = ChainTransactionEvent.objects.get(chain_transaction=tx)
    assert event.actor_id == "venues.evm@worker:host:1:abc#epoch3/attempt2"
    assert link_problem(event) is None
    # when its evidence is edited below the application
    tamper(
        "UPDATE {table} SET evidence = %s WHERE id = %s",
        [json.dumps({"block_hash": "0xdef"}), event.pk],
        model=ChainTransactionEvent,
    )

    assert f"venues.chaintransactionevent stream {tx.pk} row {event.pk}: its content" in breaks()


# --- keys and checkpoints ----------------------------------------------------------------------


def test_a_rotated_key_still_verifies_the_rows_the_old_key_signed(make_movement):
    old = make_movement(approve=True)
    previous = use_audit_key(
        HmacKeyring([("k2", b"a-new-audit-key-32-bytes-long!!"), ("embedded", _embedded())])
    )
    try:
        new = make_movement(approve=True)
        assert {e.chain_key for e in events(new)} == {"k2"}
        assert "audit chain intact" in verify()
        # a keyring that dropped the old key cannot vouch for its rows
        use_audit_key(HmacKeyring([("k2", b"a-new-audit-key-32-bytes-long!!")]))
        out = breaks()
    finally:
        use_audit_key(previous)

    assert f"stream {old.pk} row" in out and "which this keyring does not hold" in out


def _embedded() -> bytes:
    from django.conf import settings

    return settings.QTG_AUDIT_KEY.encode()


def test_a_checkpoint_is_signed_appended_logged_and_sent_to_subscribers(
    make_movement, checkpoint_file, caplog
):
    from callbacks.models import Delivery, Subscription

    Subscription.objects.create(
        url="https://auditor.example/hook", secret="s" * 32, event_types=["audit.checkpoint"]
    )
    movement = make_movement(approve=True)

    with caplog.at_level("INFO", logger="qtg.audit"):
        first = audit_checkpoint(reason="test")
        second = audit_checkpoint(reason="test")

    lines = checkpoint_file.read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2]
    table = first["tables"]["movements.movementevent"]
    assert table["streams"][str(movement.pk)][0] == len(events(movement))
    assert second["tables"]["movements.movementevent"]["streams"] == {}  # nothing new
    assert "audit checkpoint 1 written" in caplog.text
    sent = Delivery.objects.filter(event_type="audit.checkpoint")
    assert {json.loads(d.body)["data"]["sig"] for d in sent} == {first["sig"], second["sig"]}


def test_an_edited_or_removed_checkpoint_is_named(make_movement, checkpoint_file):
    make_movement(approve=True)
    for _ in range(3):
        checkpoint_write(reason="test")
    lines = checkpoint_file.read_text().splitlines()
    edited = json.loads(lines[0])
    edited["tables"]["movements.movementevent"]["rows"] = 0
    checkpoint_file.write_text("\n".join([json.dumps(edited), lines[2]]) + "\n")

    problems = read_checkpoints().problems

    assert problems == [
        "checkpoint line 1: its signature fails",
        "checkpoint line 2 (seq 3): does not follow the previous checkpoint "
        "(a checkpoint was removed or reordered)",
    ]


def test_the_standard_library_script_verifies_a_checkpoint_file(make_movement, checkpoint_file):
    import subprocess
    import sys
    from pathlib import Path

    from django.conf import settings

    make_movement(approve=True)
    checkpoint_write(reason="test")
    checkpoint_write(reason="test")
    script = Path(__file__).resolve().parents[2] / "docs" / "verify_checkpoints.py"

    def run(path):
        return subprocess.run(
            [sys.executable, "-I", str(script), str(path)],
            env={"QTG_AUDIT_KEY": settings.QTG_AUDIT_KEY, "QTG_AUDIT_KEY_ID": "embedded"},
            capture_output=True,
            text=True,
            timeout=30,
        )

    good = run(checkpoint_file)
    lines = checkpoint_file.read_text().splitlines()
    checkpoint_file.write_text(lines[1] + "\n")
    bad = run(checkpoint_file)

    assert good.returncode == 0, good.stderr
    assert "2 checkpoint(s) verified" in good.stdout
    assert bad.returncode == 1 and "does not follow" in bad.stdout


def test_the_bounded_verification_from_beat_finds_recent_tampering_and_reports_it(
    make_movement, client, settings
):
    from ops import gauges
    from ops.audit import audit_verify_recent
    from ops.health import audit_detail
    from tests.ops.test_metrics import sample, scrape

    settings.QTG_METRICS_TOKEN = ""
    movement = make_movement(approve=True)
    checkpoint_write(reason="test")
    assert audit_verify_recent().breaks == []
    newest = events(movement)[-1]
    tamper("DELETE FROM {table} WHERE id = %s", [newest.pk])

    status = audit_verify_recent()

    total = MovementEvent.objects.count() + 1
    assert sorted(status.breaks) == sorted(
        [
            f"movements.movementevent stream {movement.pk}: 1 checkpointed row(s) deleted",
            f"movements.movementevent stream *: 1 of {total} checkpointed row(s) missing",
        ]
    )
    assert audit_detail()["status"] == "broken"
    gauges.refresh()
    assert sample(scrape(client), "qtg_audit_chain_breaks") == 2.0


def test_the_bounded_verification_reads_at_most_its_limit_per_table(make_movement):
    from datetime import timedelta

    for _ in range(3):
        make_movement(approve=True)

    result = verify_recent(since=timedelta(hours=1), limit=2)

    assert result.ok
    assert result.rows == sum(min(2, m._base_manager.count()) for m in chained_models())


# --- decisions without an event table of their own ---------------------------------------------


def test_policy_address_book_and_override_decisions_are_linked_records(db):
    from movements.services.address_book import address_approve, address_propose, address_remove
    from tests.approvals.conftest import act, staff

    alice, bob = staff("alice-a", "operators"), staff("bob-a", "supervisors")
    entry = address_propose(actor=act(alice), asset="USDC", address="0xfeed", label="cold")
    address_approve(entry=entry, actor=act(bob))
    address_remove(entry=entry, actor=act(alice))

    records = list(AuditRecord.objects.filter(subject=f"movements.addressbookentry:{entry.pk}"))

    assert [(r.action, r.actor_id) for r in records] == [
        ("proposed", "user:alice-a"),
        ("approved", "user:bob-a"),
        ("removed", "user:alice-a"),
    ]
    assert all(link_problem(r) is None for r in records)
    assert records[1].chain_prev == records[0].chain_hash


def test_every_evidence_table_is_chained():
    labels = {model._meta.label_lower for model in chained_models()}

    assert labels >= {
        "movements.movementevent",
        "movements.movementapproval",
        "movements.auditrecord",
        "reservations.reservationevent",
        "venues.chaintransactionevent",
        "access.apitokenevent",
    }


def test_a_full_verification_of_a_fresh_trail_reads_every_row(make_movement):
    make_movement(approve=True)
    result = verify_all()

    assert result.ok
    assert result.rows == sum(model._base_manager.count() for model in chained_models())


def test_approval_rows_are_linked_and_an_edited_approver_is_named(make_movement):
    movement = make_movement(approve=True)
    approval = MovementApproval.objects.get(request=movement)
    assert link_problem(approval) is None
    tamper(
        "UPDATE {table} SET approver = 'user:mallory' WHERE id = %s",
        [approval.pk],
        model=MovementApproval,
    )

    assert f"movements.movementapproval stream {movement.pk} row {approval.pk}" in breaks()


def test_the_movement_page_shows_where_its_chain_breaks(admin_client, make_movement):
    movement = make_movement(approve=True)
    url = f"/admin/movements/movementrequest/{movement.pk}/change/"
    assert "verified (" in admin_client.get(url).content.decode()
    edited = events(movement)[1]
    tamper("UPDATE {table} SET actor_id = 'someone-else' WHERE id = %s", [edited.pk])

    page = admin_client.get(url).content.decode()

    assert f"broken at movementevent {edited.pk}" in page


def test_every_evidence_table_names_its_stream_and_time_columns():
    for model in chained_models():
        names = {f.attname for f in model._meta.concrete_fields}
        assert model.chain_stream in names, model
        assert model.chain_time in names, model


def test_a_key_file_signs_with_its_first_key_and_verifies_with_every_key(settings, tmp_path):
    from qtg.core.audit_keys import keyring_from_settings

    keys = tmp_path / "keys.txt"
    keys.write_text(
        "# newest first\nk2 second-secret-of-enough-length\nk1 first-secret-of-enough\n"
    )
    settings.QTG_AUDIT_KEY_FILE = str(keys)

    ring = keyring_from_settings()
    signature = ring.sign(b"message")

    assert ring.key_id == "k2"
    assert ring.verify("k2", b"message", signature) is True
    assert ring.verify("k1", b"message", signature) is False
    assert ring.verify("k9", b"message", signature) is None


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ([], "empty"),
        ([("k1", b"short")], "shorter than 16"),
        ([("legacy", b"x" * 32)], "not usable"),
    ],
)
def test_an_unusable_keyring_is_refused(keys, message):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=message):
        HmacKeyring(keys)


def test_audit_verify_since_is_bounded_and_names_a_recent_edit(make_movement):
    movement = make_movement(approve=True)
    edited = events(movement)[-1]
    tamper("UPDATE {table} SET actor_id = 'someone-else' WHERE id = %s", [edited.pk])

    out = breaks("--since", "10m", "--limit", "100")

    assert f"stream {movement.pk} row {edited.pk}: its content" in out


def subscription_records(subscription) -> list[tuple[str, str]]:
    rows = AuditRecord.objects.filter(subject=f"callbacks.subscription:{subscription.pk}")
    assert all(link_problem(row) is None for row in rows)
    return [(row.action, row.actor_id) for row in rows.order_by("pk")]


def test_webhook_subscription_changes_in_the_console_are_linked_records_naming_the_person(
    admin_client,
):
    from django.urls import reverse

    from callbacks.models import Subscription

    form = {
        "name": "treasury",
        "url": "https://receiver.example/hook",
        "event_types": ["request_completed"],
        "is_active": "on",
    }
    admin_client.post(reverse("admin:callbacks_subscription_add"), form)
    subscription = Subscription.objects.get(name="treasury")
    change = reverse("admin:callbacks_subscription_change", args=[subscription.pk])
    admin_client.post(change, {**form, "rotate_secret": "on"})
    delete = reverse("admin:callbacks_subscription_delete", args=[subscription.pk])
    admin_client.post(delete, {"post": "yes"})

    assert subscription_records(subscription) == [
        ("created", "user:admin"),
        ("changed", "user:admin"),
        ("secret_rotated", "user:admin"),
        ("deleted", "user:admin"),
    ]
    # deleting keeps the row the records name (and its deliveries' history): it stops sending
    subscription.refresh_from_db()
    assert not subscription.is_active and subscription.deleted_at is not None


def test_a_secret_rotated_through_the_api_names_the_client_who_rotated_it():
    from callbacks.models import Subscription
    from tests.api.conftest import client_for, post_json
    from tests.conftest import make_user

    client = client_for(make_user("bot"))
    created = post_json(
        client, "/api/v1/webhooks/", {"url": "https://r.example/h", "event_types": ["*"]}
    )
    assert created.status_code == 201, created.content
    post_json(client, f"/api/v1/webhooks/{created.json()['id']}/rotate-secret/", {})

    subscription = Subscription.objects.get(pk=created.json()["id"])
    assert subscription_records(subscription) == [
        ("created", "user:bot"),
        ("secret_rotated", "user:bot"),
    ]


def test_the_exchange_journal_keeps_the_lost_answer_when_recovery_finds_the_withdrawal(db):
    from decimal import Decimal

    from qtg.core.actors import acting_for
    from venues.cex import journal

    # given a withdrawal whose answer was lost (UNKNOWN), then found by recovery
    row = journal.withdrawal_begin(
        client_id="qtg-lost-1",
        exchange="binance",
        account="main",
        coin="USDC",
        network="ETH",
        address="0x" + "ab" * 20,
        amount=Decimal("10"),
        request_id="r-1",
        node_key="withdraw",
    )
    journal.mark_sent(row, valid_until=None, skew_ms=0)
    with acting_for("worker:host:1:abc#epoch4/attempt1"):
        journal.advance(row, to=journal.State.UNKNOWN, error="read timed out")
    with acting_for("worker:host:2:def#epoch5/attempt1"):
        journal.advance(row, to=journal.State.FOUND, withdrawal_id="W-77")

    # then the lost answer is still there, and the finding is a record of its own
    row.refresh_from_db()
    assert (row.state, row.withdrawal_id, row.error) == ("FOUND", "W-77", "read timed out")
    records = list(AuditRecord.objects.filter(subject="cexwithdrawal:qtg-lost-1").order_by("pk"))
    assert [(r.action, r.detail["error"], r.detail["withdrawal_id"]) for r in records] == [
        ("answer:UNKNOWN", "read timed out", ""),
        ("answer:FOUND", "", "W-77"),
    ]
    assert [r.actor_id for r in records] == [
        "system:venues.cex@worker:host:1:abc#epoch4/attempt1",
        "system:venues.cex@worker:host:2:def#epoch5/attempt1",
    ]
    assert all(link_problem(r) is None for r in records)
    assert records[1].chain_prev == records[0].chain_hash


def test_approval_policy_versions_proposed_activated_and_superseded_are_linked_records(db):
    from movements.services.approvals import approval_policy_activate, approval_policy_propose
    from tests.approvals.conftest import act, staff

    alice, carol = staff("alice-p", "operators"), staff("carol-p", "supervisors")
    first = approval_policy_propose(actor=act(alice), key="large", approvals_required=2)
    approval_policy_activate(policy=first, actor=act(carol))
    second = approval_policy_propose(actor=act(alice), key="large", approvals_required=3)
    approval_policy_activate(policy=second, actor=act(carol))

    def trail(policy):
        rows = AuditRecord.objects.filter(subject=f"movements.approvalpolicy:{policy.pk}")
        assert all(link_problem(row) is None for row in rows)
        return [(r.action, r.actor_id, r.detail["approvals_required"]) for r in rows.order_by("pk")]

    assert trail(first) == [
        ("proposed", "user:alice-p", 2),
        ("activated", "user:carol-p", 2),
        ("superseded", "user:carol-p", 2),
    ]
    assert trail(second) == [("proposed", "user:alice-p", 3), ("activated", "user:carol-p", 3)]


def test_a_chain_transaction_event_written_outside_a_venue_call_names_its_process(db):
    import os
    import socket

    from venues.models import ChainTransactionEvent
    from venues.transactions import chain_transaction_create

    # given a venue record written by a sweep (no claimed node, no lease): e.g. the watch of
    # concluded transfers walking a transaction back
    tx = chain_transaction_create(
        chain="anvil",
        sender="0x" + "ab" * 20,
        nonce=0,
        unsigned={"to": "0x" + "cd" * 20, "value": 1},
        actor=Actor.system("venues.evm.watch"),
        family="evm",
    )

    event = ChainTransactionEvent.objects.get(chain_transaction=tx)
    assert event.actor_id == f"venues.evm.watch@worker:{socket.gethostname()}:{os.getpid()}"


def test_beat_writes_a_checkpoint_and_runs_the_bounded_verification(
    settings, make_movement, checkpoint_file
):
    from ops.health import audit_detail
    from qtg.celery import app

    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"ops.audit_checkpoint", "ops.audit_verify_recent"} <= scheduled
    make_movement(approve=True)

    seq = app.tasks["ops.audit_checkpoint"].apply().get()
    breaks = app.tasks["ops.audit_verify_recent"].apply().get()

    assert (seq, breaks) == (1, 0)
    assert json.loads(checkpoint_file.read_text().splitlines()[-1])["seq"] == 1
    assert audit_detail()["status"] == "ok" and audit_detail()["checkpoint"] == 1


def test_every_event_of_a_movement_deleted_before_any_checkpoint_is_named(make_movement):
    # given a movement whose events are all deleted before a checkpoint counted them
    movement = make_movement(approve=True)
    tamper("DELETE FROM {table} WHERE request_id = %s", [db(movement.pk)])

    out = breaks()

    # then the movement, which is always created with its first event, names the loss
    assert (
        f"movements.movementevent stream {movement.pk}: every row of the stream is gone "
        f"(movements.movementrequest {movement.pk} exists)" in out
    )
    assert movement_chain_status(movement.pk).startswith("broken at movements.movementevent")

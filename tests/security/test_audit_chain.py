"""The audit trail is tamper-evident: every event carries a per-movement hash chain (computed
by every row writer), ``manage.py audit_verify`` reports an edited or removed event, and on
PostgreSQL the database itself refuses UPDATE and DELETE of movement and reservation events."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.utils import DatabaseError

from movements.audit import verify_chain
from movements.models import MovementEvent
from movements.services import movement_approve
from movements.services.state import batch
from movements.services.writers import make_row_writer, use_row_writer
from qtg.core.actors import Actor
from reservations.models import ReservationEvent

pytestmark = pytest.mark.django_db


def writer_names() -> list[str]:
    return ["orm", "postgresql"] if connection.vendor == "postgresql" else ["orm"]


def _events(request) -> list[MovementEvent]:
    return list(MovementEvent.objects.filter(request=request).order_by("request_id", "id"))


def _raw(sql: str, params: list) -> None:
    # What someone with database access does: no model, no queryset.
    table = MovementEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(sql.format(table=table), params)


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("name", ["orm", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_every_writer_chains_every_event_of_a_movement(make_movement, name, deferred):
    previous = use_row_writer(make_row_writer(name))
    try:
        movement = make_movement()
        with transaction.atomic(), batch() if deferred else transaction.atomic():
            movement_approve(request=movement, actor=Actor.system("tests-approver"))
    finally:
        use_row_writer(previous)

    events = _events(movement)
    assert len(events) >= 3
    assert all(len(event.chain_hash) == 64 for event in events)
    assert len({event.chain_hash for event in events}) == len(events)
    assert verify_chain(events) == []


def test_audit_verify_reports_an_intact_trail(make_movement):
    make_movement(approve=True)
    out = StringIO()

    call_command("audit_verify", stdout=out)

    assert "audit chain intact" in out.getvalue()


@pytest.mark.skipif("connection.vendor == 'postgresql'", reason="the trigger refuses the edit")
def test_audit_verify_reports_an_edited_event(make_movement):
    movement = make_movement(approve=True)
    edited = _events(movement)[1]
    _raw("UPDATE {table} SET actor_id = %s WHERE id = %s", ["someone-else", edited.pk])
    out = StringIO()

    with pytest.raises(CommandError, match="1 break"):
        call_command("audit_verify", stdout=out)

    assert f"event {edited.pk}: content changed" in out.getvalue()


@pytest.mark.skipif("connection.vendor == 'postgresql'", reason="the trigger refuses the delete")
def test_audit_verify_reports_a_removed_event(make_movement):
    movement = make_movement(approve=True)
    first, second, *_ = _events(movement)
    _raw("DELETE FROM {table} WHERE id = %s", [first.pk])
    out = StringIO()

    with pytest.raises(CommandError):
        call_command("audit_verify", "--movement", str(movement.pk), stdout=out)

    assert f"event {second.pk}" in out.getvalue()


@pytest.mark.postgres
@pytest.mark.parametrize("model", [MovementEvent, ReservationEvent])
@pytest.mark.parametrize(
    "statement", ["UPDATE {table} SET {column} = {column}", "DELETE FROM {table}"]
)
def test_postgresql_refuses_to_change_or_delete_an_audit_event(make_movement, model, statement):
    make_movement(approve=True)
    assert model.objects.exists()
    sql = statement.format(table=model._meta.db_table, column=model._meta.pk.column)

    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)

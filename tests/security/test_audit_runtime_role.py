"""The database refuses, for the role that runs the app (issue 28): as the runtime role that
``manage.py qtg_db_grants`` sets up, evidence tables take SELECT and INSERT only; UPDATE,
DELETE, TRUNCATE (even CASCADE), ALTER TABLE .. DISABLE TRIGGER are refused, while the
application itself runs. Statement-level triggers refuse TRUNCATE for everyone, and an insert
marked legacy is refused. ``qtg_prestart`` warns loudly when the app's role could rewrite
evidence."""

from contextlib import contextmanager
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.utils import DatabaseError

from movements.models import MovementApproval, MovementEvent
from movements.services.execution.claims import claim_ready_nodes
from ops.db_roles import apply_grants, runtime_role_problems
from qtg.core.chain import chained_models, link_problem
from reservations.models import ReservationEvent

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

ROLE = "qtg_audit_runtime_test"


@pytest.fixture
def runtime_role(db):
    with connection.cursor() as cursor:
        cursor.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') "
            f"THEN CREATE ROLE {ROLE} NOLOGIN; END IF; END $$"
        )
    apply_grants(ROLE)
    return ROLE


@contextmanager
def as_role(role: str):
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {role}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")


def refused(sql: str, params=()) -> str:
    with (
        pytest.raises(DatabaseError) as caught,
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, params)
    return str(caught.value)


def test_the_app_runs_as_the_runtime_role(runtime_role, make_movement):
    with as_role(runtime_role):
        movement = make_movement(approve=True)
        claims = claim_ready_nodes(owner="runtime-role-test")

    assert [c.node.node_key for c in claims] == ["withdraw"]
    assert all(link_problem(e) is None for e in MovementEvent.objects.filter(request=movement))


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {table} SET chain_hash = chain_hash",
        "DELETE FROM {table}",
        "TRUNCATE {table} CASCADE",
        "ALTER TABLE {table} DISABLE TRIGGER ALL",
        'ALTER TABLE {table} DISABLE TRIGGER "{table}_append_only"',
        "CREATE TRIGGER qtg_evil BEFORE INSERT ON {table} FOR EACH ROW "
        "EXECUTE FUNCTION qtg_refuse_audit_change()",
    ],
)
@pytest.mark.parametrize("model", chained_models(), ids=lambda m: m._meta.label_lower)
def test_the_runtime_role_cannot_rewrite_or_unguard_evidence(
    runtime_role, make_movement, model, statement
):
    make_movement(approve=True)
    table = model._meta.db_table

    with as_role(runtime_role):
        error = refused(statement.format(table=table))

    assert "permission denied" in error or "must be owner" in error or "append-only" in error


def test_the_runtime_role_may_void_an_approval_once_and_change_nothing_else(
    runtime_role, make_movement
):
    movement = make_movement(approve=True)
    approval = MovementApproval.objects.get(request=movement)
    table = MovementApproval._meta.db_table

    with as_role(runtime_role):
        binding = refused(f"UPDATE {table} SET binding_hash = 'x' WHERE id = %s", [approval.pk])
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET void_at = now(), void_reason = 'changed' WHERE id = %s",
                [approval.pk],
            )
        again = refused(f"UPDATE {table} SET void_at = NULL WHERE id = %s", [approval.pk])

    assert "permission denied" in binding
    assert "only voiding an approval once" in again


@pytest.mark.parametrize("model", [MovementEvent, ReservationEvent], ids=["event", "reservation"])
def test_truncate_is_refused_even_for_the_owner(make_movement, model):
    make_movement(approve=True)
    with connection.cursor() as cursor:
        # The test's own rows are uncommitted: settle their deferred foreign-key checks.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")

    error = refused(f"TRUNCATE {model._meta.db_table} CASCADE")

    assert "TRUNCATE on" in error and "append-only" in error


def test_an_insert_marked_legacy_is_refused(make_movement):
    movement = make_movement(approve=True)
    row = MovementEvent.objects.filter(request=movement).first()
    table = MovementEvent._meta.db_table

    error = refused(
        f"INSERT INTO {table} (request_id, node_key, kind, old_state, new_state, actor_type, "
        f"actor_id, detail, created_at, chain_prev, chain_hash, chain_key) "
        f"VALUES (%s, '', 'record', '', '', 'system', 'x', '{{}}', now(), '', '', 'legacy')",
        [row.request_id],
    )

    assert "must carry a keyed link" in error


def test_the_prestart_check_names_what_the_apps_role_could_do(runtime_role, make_movement):
    # the test connection is a superuser: everything
    user = connection.settings_dict["USER"]
    assert runtime_role_problems() == [
        f"database role {user} is a superuser: it can rewrite and truncate evidence"
    ]
    # the runtime role after qtg_db_grants: nothing
    assert runtime_role_problems(runtime_role) == []
    with connection.cursor() as cursor:
        cursor.execute(f"GRANT DELETE ON {MovementEvent._meta.db_table} TO {runtime_role}")
    assert runtime_role_problems(runtime_role) == [
        f"{runtime_role} may DELETE {MovementEvent._meta.db_table}"
    ]


def test_qtg_prestart_warns_loudly_when_the_app_could_rewrite_evidence(
    settings, tmp_path, monkeypatch
):
    settings.QTG_AUDIT_CHECKPOINT_FILE = str(tmp_path / "cp.jsonl")
    settings.QTG_DB_RUNTIME_ROLE = ""
    # prestart empties the metrics directory: a deployment's, not this test process's (whose
    # counters would then be written to unlinked files and vanish from /metrics).
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_4242.db").write_bytes(b"left by a dead process")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir))
    out, err = StringIO(), StringIO()

    call_command("qtg_prestart", stdout=out, stderr=err)

    assert "WARNING: the audit trail is not protected by the database" in err.getvalue()
    assert "audit checkpoint 1 written" in out.getvalue()
    assert metrics_dir.is_dir() and not any(metrics_dir.iterdir())


def test_qtg_db_grants_refuses_a_runtime_role_that_owns_tables(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="owns"):
        call_command("qtg_db_grants", "--runtime-role", connection.settings_dict["USER"])

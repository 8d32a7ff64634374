"""Audit tables the database itself keeps append-only (PostgreSQL): a trigger refuses every
UPDATE and DELETE, whoever sends it. Used by the apps' migrations; other databases rely on
``AppendOnlyModel`` and the hash chain (movements/audit.py)."""

FUNCTION = "qtg_refuse_audit_change"


def _create_function(cursor) -> None:
    cursor.execute(
        f"CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        f"BEGIN RAISE EXCEPTION '% on %: audit events are append-only', TG_OP, TG_TABLE_NAME "
        f"USING ERRCODE = 'insufficient_privilege'; END $$"
    )


def make_append_only(table: str):
    """A RunPython function adding the trigger to ``table`` (nothing off PostgreSQL)."""

    def forwards(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        with schema_editor.connection.cursor() as cursor:
            _create_function(cursor)
            cursor.execute(
                f'CREATE TRIGGER "{table}_append_only" BEFORE UPDATE OR DELETE ON "{table}" '
                f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
            )

    return forwards


def drop_append_only(table: str):
    """The reverse of ``make_append_only``."""

    def backwards(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(f'DROP TRIGGER IF EXISTS "{table}_append_only" ON "{table}"')

    return backwards

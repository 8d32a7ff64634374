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


# --- evidence tables (issue 28): also no TRUNCATE, no legacy-marked inserts -------------------

LEGACY_INSERT_FUNCTION = "qtg_refuse_legacy_insert"
VOID_ONLY_FUNCTION = "qtg_allow_void_only"


def _create_evidence_functions(cursor) -> None:
    _create_function(cursor)
    # Rows marked legacy come from the migration that keyed the links, never from an insert.
    cursor.execute(
        f"CREATE OR REPLACE FUNCTION {LEGACY_INSERT_FUNCTION}() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ BEGIN IF NEW.chain_key = 'legacy' THEN RAISE EXCEPTION "
        f"'INSERT on %: a new evidence row must carry a keyed link', TG_TABLE_NAME "
        f"USING ERRCODE = 'insufficient_privilege'; END IF; RETURN NEW; END $$"
    )
    # An approval may be voided once (void_at from NULL), and nothing else of it changes.
    cursor.execute(
        f"CREATE OR REPLACE FUNCTION {VOID_ONLY_FUNCTION}() RETURNS trigger LANGUAGE plpgsql "
        f"AS $$ BEGIN IF OLD.void_at IS NULL AND "
        f"(to_jsonb(NEW) - 'void_at' - 'void_reason') = "
        f"(to_jsonb(OLD) - 'void_at' - 'void_reason') THEN RETURN NEW; END IF; "
        f"RAISE EXCEPTION 'UPDATE on %: only voiding an approval once is allowed', "
        f"TG_TABLE_NAME USING ERRCODE = 'insufficient_privilege'; END $$"
    )


def evidence_triggers(table: str, *, row_triggers: bool, void_only: bool = False) -> list[str]:
    """The statements guarding ``table`` (``row_triggers``: add the UPDATE/DELETE refusal,
    which older migrations already gave some tables)."""
    statements = [
        f'CREATE TRIGGER "{table}_no_truncate" BEFORE TRUNCATE ON "{table}" '
        f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()",
        f'CREATE TRIGGER "{table}_keyed_insert" BEFORE INSERT ON "{table}" '
        f"FOR EACH ROW EXECUTE FUNCTION {LEGACY_INSERT_FUNCTION}()",
    ]
    if void_only:
        statements += [
            f'CREATE TRIGGER "{table}_append_only" BEFORE DELETE ON "{table}" '
            f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()",
            f'CREATE TRIGGER "{table}_void_only" BEFORE UPDATE ON "{table}" '
            f"FOR EACH ROW EXECUTE FUNCTION {VOID_ONLY_FUNCTION}()",
        ]
    elif row_triggers:
        statements.append(
            f'CREATE TRIGGER "{table}_append_only" BEFORE UPDATE OR DELETE ON "{table}" '
            f"FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
        )
    return statements


def make_evidence(table: str, *, row_triggers: bool, void_only: bool = False):
    """A RunPython function guarding an evidence table on PostgreSQL: no UPDATE or DELETE
    (unless ``row_triggers`` is False: an earlier migration added them), no TRUNCATE, no
    insert marked legacy; ``void_only``: an approval may be voided once."""

    def forwards(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        with schema_editor.connection.cursor() as cursor:
            _create_evidence_functions(cursor)
            for statement in evidence_triggers(
                table, row_triggers=row_triggers, void_only=void_only
            ):
                cursor.execute(statement)

    return forwards


def drop_evidence(table: str, *, row_triggers: bool, void_only: bool = False):
    """The reverse of ``make_evidence``."""

    def backwards(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        names = ["no_truncate", "keyed_insert"]
        if void_only:
            names += ["append_only", "void_only"]
        elif row_triggers:
            names.append("append_only")
        with schema_editor.connection.cursor() as cursor:
            for name in names:
                cursor.execute(f'DROP TRIGGER IF EXISTS "{table}_{name}" ON "{table}"')

    return backwards

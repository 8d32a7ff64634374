"""Two database roles on PostgreSQL (docs/audit.md): an owner that runs the migrations and
owns every table, and the runtime role the web, workers and beat connect as. The runtime role
may read and write the application's tables, but on evidence tables (``qtg.core.chain``) it
may only SELECT and INSERT (and void an approval once: UPDATE of two columns, which a trigger
narrows further): no UPDATE, DELETE, TRUNCATE, TRIGGER, and, not owning them, no ALTER TABLE
(so no ``DISABLE TRIGGER`` either).

``manage.py qtg_db_grants --runtime-role NAME`` applies this (as the owner, after migrating);
``qtg_prestart`` warns loudly when the role the application runs as could rewrite evidence.
"""

from __future__ import annotations

from django.db import connection

from qtg.core.chain import chained_models

# Column-level UPDATE the runtime role keeps on an evidence table (voiding an approval).
MUTABLE_COLUMNS = {"movements_movementapproval": ("void_at", "void_reason")}
FORBIDDEN = ("UPDATE", "DELETE", "TRUNCATE", "TRIGGER", "REFERENCES")
# Tables only the owner writes (the migrations' own record).
READ_ONLY = {"django_migrations"}


def evidence_tables() -> list[str]:
    return [model._meta.db_table for model in chained_models()]


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def grant_statements(runtime_role: str) -> list[str]:
    """What makes ``runtime_role`` the runtime role of the current database."""
    role = _q(runtime_role)
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        tables = sorted(row[0] for row in cursor.fetchall())
    evidence = set(evidence_tables())
    statements = [
        f"GRANT USAGE ON SCHEMA {_q('public')} TO {role}",
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {_q('public')} TO {role}",
    ]
    for table in tables:
        if table in evidence:
            statements += [
                f"REVOKE ALL ON {_q(table)} FROM {role}",
                f"GRANT SELECT, INSERT ON {_q(table)} TO {role}",
            ]
            columns = MUTABLE_COLUMNS.get(table)
            if columns:
                statements.append(
                    f"GRANT UPDATE ({', '.join(_q(c) for c in columns)}) ON {_q(table)} TO {role}"
                )
        elif table in READ_ONLY:
            statements += [
                f"REVOKE ALL ON {_q(table)} FROM {role}",
                f"GRANT SELECT ON {_q(table)} TO {role}",
            ]
        else:
            statements += [
                f"REVOKE TRUNCATE, TRIGGER, REFERENCES ON {_q(table)} FROM {role}",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON {_q(table)} TO {role}",
            ]
    return statements


def apply_grants(runtime_role: str) -> list[str]:
    """Apply ``grant_statements``; returns them. Refuses a runtime role that owns tables."""
    owned = owned_tables(runtime_role)
    if owned:
        raise ValueError(
            f"role {runtime_role} owns {len(owned)} table(s) ({', '.join(owned[:3])}...): an "
            f"owner can ALTER TABLE .. DISABLE TRIGGER; let the migrating role own them "
            f"(ALTER TABLE .. OWNER TO <owner>)"
        )
    statements = grant_statements(runtime_role)
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
    return statements


def owned_tables(role: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tableowner = %s ORDER BY tablename",
            [role],
        )
        return [row[0] for row in cursor.fetchall()]


def runtime_role_problems(role: str | None = None) -> list[str]:
    """What ``role`` (default: the connection's own) could do to evidence that it must not."""
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        if role is None:
            cursor.execute("SELECT current_user")
            role = cursor.fetchone()[0]
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role])
        row = cursor.fetchone()
        if row is None:
            return [f"database role {role} does not exist"]
        if row[0]:
            return [f"database role {role} is a superuser: it can rewrite and truncate evidence"]
        problems = []
        owned = set(owned_tables(role))
        for table in evidence_tables():
            if table in owned:
                problems.append(f"{role} owns {table} (ALTER TABLE .. DISABLE TRIGGER)")
                continue
            granted = []
            for privilege in FORBIDDEN:
                cursor.execute("SELECT has_table_privilege(%s, %s, %s)", [role, table, privilege])
                if cursor.fetchone()[0]:
                    granted.append(privilege)
            if granted:
                problems.append(f"{role} may {', '.join(granted)} {table}")
        return problems

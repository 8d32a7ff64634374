"""``manage.py qtg_db_grants --runtime-role NAME``: make NAME the runtime database role (run as
the owner, after ``migrate``): evidence tables SELECT and INSERT only (docs/audit.md)."""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from ops.db_roles import apply_grants, runtime_role_problems


class Command(BaseCommand):
    help = "Grant the runtime database role what it needs, and nothing that rewrites evidence."

    def add_arguments(self, parser):
        parser.add_argument("--runtime-role", required=True)
        parser.add_argument(
            "--dry-run", action="store_true", help="Print the statements, apply nothing."
        )

    def handle(self, *args, runtime_role, dry_run=False, **options):
        if connection.vendor != "postgresql":
            raise CommandError("database roles are a PostgreSQL deployment's (DATABASE_URL)")
        from ops.db_roles import grant_statements

        if dry_run:
            for statement in grant_statements(runtime_role):
                self.stdout.write(statement + ";")
            return
        try:
            with transaction.atomic():
                statements = apply_grants(runtime_role)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        problems = runtime_role_problems(runtime_role)
        if problems:
            raise CommandError("still: " + "; ".join(problems))
        self.stdout.write(f"{len(statements)} grant statements applied to {runtime_role}")

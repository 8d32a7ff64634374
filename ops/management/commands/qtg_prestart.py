"""``manage.py qtg_prestart``: what runs once before web, worker and beat start (the production
start and ``make run`` alike): migrate, bring the console's role groups up to date
(``setup_groups``: the roles are code, so a deployment has them as its release defines them),
collect static files for whitenoise, empty the
metrics directory of the previous run's processes, check that the application's database role
cannot rewrite evidence (a loud warning), and write a signed audit checkpoint."""

import logging
import os
import shutil
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from movements.permissions import ensure_operator_groups
from ops.audit import audit_checkpoint
from ops.db_roles import runtime_role_problems

logger = logging.getLogger("qtg.audit")


class Command(BaseCommand):
    help = "Migrate, role groups, collectstatic, reset metrics, check db roles, checkpoint."

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("database migrated")
        groups = ensure_operator_groups()
        self.stdout.write(f"role groups up to date: {', '.join(groups)}")
        call_command("collectstatic", interactive=False, verbosity=0)
        self.stdout.write("static files collected")
        metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
            Path(metrics_dir).mkdir(parents=True, exist_ok=True)
        role = settings.QTG_DB_RUNTIME_ROLE or None
        for problem in runtime_role_problems(role):
            message = (
                f"WARNING: the audit trail is not protected by the database: {problem}. "
                f"Run the application as a runtime role without these rights "
                f"(manage.py qtg_db_grants; docs/audit.md)."
            )
            logger.warning(message)
            self.stderr.write(message)
        payload = audit_checkpoint(reason="prestart")
        self.stdout.write(f"audit checkpoint {payload['seq']} written")

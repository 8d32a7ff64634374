"""The whole product in one command: prepare (migrate, collect static files), seed the demo,
then run the Procfile's web (gunicorn), worker and beat through honcho, each line of output
labelled with its process, until Ctrl-C."""

import os
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from honcho.environ import parse_procfile
from honcho.manager import Manager
from honcho.printer import Printer
from kombu.utils.url import maybe_sanitize_url

from movements import interface


def procfile_processes() -> dict[str, str]:
    """The production start's process lines (``Procfile``), by name."""
    return dict(parse_procfile((Path(settings.BASE_DIR) / "Procfile").read_text()).processes)


class Command(BaseCommand):
    help = "Migrate, seed demo data and run web + Celery worker + beat (Ctrl-C stops all)."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000", help="web address:port")
        parser.add_argument("--no-seed", action="store_true", help="skip the demo data")

    def handle(self, *args, addr="127.0.0.1:8000", no_seed=False, **options):
        call_command("qtg_prestart")
        if not no_seed:
            call_command("seed_demo")
        env = {
            **os.environ,
            "QTG_BIND": addr,
            "QTG_VAR_DIR": str(settings.VAR_DIR),
            "QTG_CELERY_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE,
            # The processes run this interpreter's tools (gunicorn, celery) from its venv.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
        }
        # SQLite serialises writers: one solo worker and one web process.
        if not settings.DB_IS_POSTGRES:
            env.setdefault("QTG_WORKER_POOL", "solo")
            env.setdefault("WEB_CONCURRENCY", "1")
        self.stdout.write(
            self.style.SUCCESS(
                f"\nQTG is starting: http://{addr}/admin/  (API: http://{addr}/api/v1/, "
                f"health: http://{addr}/health/)\n"
                f"Log in as operator (approve, release gates) or supervisor (rescue) with the\n"
                f"passwords printed above; admin is a superuser.\n"
                f"Broker: {maybe_sanitize_url(settings.CELERY_BROKER_URL)}; "
                f"database: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}. "
                f"Ctrl-C stops web, worker and beat.\n"
            )
        )
        self.stdout.flush()
        # Venue stand-ins (QTG_VENUES=local) start first: the processes need their addresses.
        children = []
        try:
            for start in interface.embedded_services():
                children.extend(start(env))
            manager = Manager(Printer(sys.stdout))
            for name, command in procfile_processes().items():
                manager.add_process(name, command, env=env, cwd=str(settings.BASE_DIR))
            manager.loop()
        finally:
            for child in children:
                if child.poll() is None:
                    child.terminate()
            for child in children:
                try:
                    child.wait(timeout=10)
                except Exception:
                    child.kill()
        sys.exit(manager.returncode)

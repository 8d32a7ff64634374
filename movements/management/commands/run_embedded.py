"""The whole product in one command: prepare (migrate, collect static files), seed the demo,
then run the Procfile's web (gunicorn), worker and beat under QTG's supervisor
(``qtg/supervisor.py``: a process that dies is restarted with backoff, the others keep
running), each line of output labelled with its process, until Ctrl-C."""

import os
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from honcho.environ import parse_procfile
from kombu.utils.url import maybe_sanitize_url

from movements import ports
from qtg.supervisor import Supervisor


def procfile_processes() -> dict[str, str]:
    """The production start's process lines (``Procfile``), by name."""
    return dict(parse_procfile((Path(settings.BASE_DIR) / "Procfile").read_text()).processes)


class Command(BaseCommand):
    help = (
        "Migrate, seed demo data and run web + Celery worker + beat, each restarted when it "
        "dies (Ctrl-C stops all)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000", help="web address:port")
        parser.add_argument("--no-seed", action="store_true", help="skip the demo data")

    def handle(self, *args, addr="127.0.0.1:8000", no_seed=False, **options):
        if settings.QTG_VENUES == "local" and not ports.embedded_services():
            # The stand-ins are test support the product never imports: their one entry
            # starts them and then runs this command.
            raise CommandError(
                "QTG_VENUES=local starts the stand-ins through `make run` "
                "(python -m standins.local), which runs this command"
            )
        call_command("qtg_prestart")
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
        # Venue stand-ins (QTG_VENUES=local) start first: the processes need their addresses,
        # and the demo's movements their accounts.
        children = []
        try:
            before = dict(env)
            for start in ports.embedded_services():
                children.extend(start(env))
            # This process seeds: it reads the venue configuration the stand-ins wrote.
            os.environ.update({k: v for k, v in env.items() if before.get(k) != v})
            if not no_seed:
                call_command("seed_demo")
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
            supervisor = Supervisor(
                procfile_processes(), env=env, cwd=str(settings.BASE_DIR), out=sys.stdout
            )
            supervisor.run()
        finally:
            for child in children:
                if child.poll() is None:
                    child.terminate()
            for child in children:
                try:
                    child.wait(timeout=10)
                except Exception:
                    child.kill()
        sys.exit(supervisor.returncode)

"""The whole product in one command: migrate, seed the demo, then run web, a Celery worker and
Celery beat as child processes until Ctrl-C."""

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from kombu.utils.url import maybe_sanitize_url


class Command(BaseCommand):
    help = "Migrate, seed demo data and run web + Celery worker + beat (Ctrl-C stops all)."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000", help="web address:port")
        parser.add_argument("--no-seed", action="store_true", help="skip the demo data")

    def handle(self, *args, addr="127.0.0.1:8000", no_seed=False, **options):
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write(self.style.SUCCESS("database migrated"))
        if not no_seed:
            call_command("seed_demo")
        python = sys.executable
        var = str(settings.VAR_DIR)
        # SQLite serialises writers: one solo worker; PostgreSQL takes a prefork pool.
        pool = ["--pool", "solo"] if not settings.DB_IS_POSTGRES else ["--concurrency", "2"]
        commands = {
            "web": [python, "manage.py", "runserver", addr, "--noreload"],
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "qtg",
                "worker",
                *pool,
                "-l",
                "INFO",
                "-Q",
                settings.CELERY_TASK_DEFAULT_QUEUE,
                "--without-gossip",
                "--without-mingle",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "qtg",
                "beat",
                "-l",
                "INFO",
                "-s",
                os.path.join(var, "celerybeat-schedule"),
            ],
        }
        children: dict[str, subprocess.Popen] = {}
        stopping = False

        def stop(signum=None, frame=None):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        for name, command in commands.items():
            # Own process group: Ctrl-C reaches us only, and we stop the children in order.
            children[name] = subprocess.Popen(
                command, cwd=settings.BASE_DIR, start_new_session=True
            )
        self.stdout.write(
            self.style.SUCCESS(
                f"\nQTG is running: http://{addr}/admin/  (API: http://{addr}/api/v1/)\n"
                f"Log in as operator (approve, release gates) or supervisor (rescue) with the\n"
                f"passwords printed above; admin is a superuser.\n"
                f"Broker: {maybe_sanitize_url(settings.CELERY_BROKER_URL)}; "
                f"database: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}. "
                f"Ctrl-C stops web, worker and beat.\n"
            )
        )
        try:
            while not stopping:
                for name, child in children.items():
                    if child.poll() is not None:
                        self.stderr.write(f"{name} exited with code {child.returncode}")
                        stopping = True
                time.sleep(0.5)
        finally:
            self._stop(children)

    def _stop(self, children: dict[str, subprocess.Popen]) -> None:
        self.stdout.write("stopping web, worker and beat ...")
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for name, child in children.items():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop in time: killing it")
                child.kill()
                child.wait()
        self.stdout.write(self.style.SUCCESS("stopped"))

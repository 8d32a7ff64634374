"""``manage.py qtg_prestart``: what runs once before web, worker and beat start (the production
start and ``make run`` alike): migrate, collect static files for whitenoise, and empty the
metrics directory of the previous run's processes."""

import os
import shutil
from pathlib import Path

from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Migrate, collectstatic and reset the multiprocess metrics directory."

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("database migrated")
        call_command("collectstatic", interactive=False, verbosity=0)
        self.stdout.write("static files collected")
        metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
            Path(metrics_dir).mkdir(parents=True, exist_ok=True)

"""The Celery app. Tasks are thin wrappers over services (see movements/tasks.py)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qtg.settings")

app = Celery("qtg")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

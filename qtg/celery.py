"""The Celery app. Tasks are thin wrappers over services (see movements/tasks.py)."""

import os
import sys

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qtg.settings")

app = Celery("qtg")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes every database connection before and after each task unless
# this is set (celery 5.5 and later close it whatever CONN_MAX_AGE says), so a worker running
# a sweep every tick opened a new PostgreSQL connection (a new server process, its caches
# cold) several times a second. The fixup now never closes them; ``_close_old_connections``
# gives each task the lifecycle Django gives a request instead: a connection older than
# CONN_MAX_AGE, or unusable after an error, is closed, and the health check runs before the
# next use.
app.conf.CELERY_DB_REUSE_MAX = sys.maxsize
app.autodiscover_tasks()


def _close_old_connections(task=None, **kwargs) -> None:
    if task is not None and task.request.is_eager:
        return  # an eager task runs inside its caller's connection and transaction
    from django.db import close_old_connections

    close_old_connections()


task_prerun.connect(_close_old_connections, weak=False, dispatch_uid="qtg-db-connections-pre")
task_postrun.connect(_close_old_connections, weak=False, dispatch_uid="qtg-db-connections-post")

"""A worker keeps its database connection from one task to the next: it does not open a new
PostgreSQL connection (a new server process, its caches cold) for each sweep, as Celery's
Django fixup would have it (qtg/celery.py)."""

import time

import pytest
from django.db import connection

from movements.models import MovementRequest
from tests.execution.conftest import Cluster, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
]


def _backends() -> set[tuple[int, str]]:
    """The other server processes connected to the test database now (pid, start time)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_start::text FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return set(cursor.fetchall())


def _watch(seconds: float) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen |= _backends()
        time.sleep(0.03)
    return seen


def test_a_worker_runs_its_sweeps_on_the_connections_it_opened(
    transactional_db, settings, tmp_path, make_movement
):
    if not settings.DB_IS_POSTGRES:
        pytest.skip("real worker processes need PostgreSQL")
    cluster = Cluster(tmp_path, workers=1).start()
    try:
        movements = [make_movement(approve=True).pk for _ in range(3)]
        wait_for(
            lambda: (
                not MovementRequest.objects.filter(
                    pk__in=movements, request_state__in=("APPROVED", "EXECUTING")
                ).exists()
            ),
            timeout=60,
            message="the worker did not run the movements",
        )
        # Settled in: the connections of the worker (its sweeps, its reaper thread) and of
        # beat. Then 5 s of sweeps every 0.3 s, three kinds: some 50 tasks.
        settled_in = _watch(1)
        later = _watch(5)
    finally:
        cluster.stop()
    states = set(
        MovementRequest.objects.filter(pk__in=movements).values_list("request_state", flat=True)
    )
    assert states == {"COMPLETED"}, states
    opened = later - settled_in
    # None (one at most: a reconnect of beat's, say); a connection per task would be dozens.
    assert len(opened) <= 1, f"{len(opened)} database connections opened: {sorted(opened)}"

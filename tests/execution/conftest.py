"""Fixtures for the execution tests: fast sandbox chains, and helpers that drive the workers'
services in-process until a movement settles."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from movements.models import MovementEvent, MovementRequest
from movements.services import execution
from movements.states import TERMINAL_REQUEST_STATES
from qtg.queues import all_queues


@pytest.fixture(autouse=True)
def fast_sandbox(settings):
    """Chains mine quickly, polls and retries are immediate: tests run in well under a second
    of simulated time per movement."""
    settings.QTG_SANDBOX_ENABLED = True
    settings.QTG_SANDBOX_TIME_SCALE = 0.002
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    settings.QTG_RETRY_BASE_SECONDS = 0
    settings.QTG_RETRY_MAX_SECONDS = 0
    # A withdrawal request the simulated exchange did not get is known lost once the call
    # returned (its validity, which a paused worker's tests set themselves, is not waited for).
    settings.QTG_SANDBOX_REQUEST_VALIDITY_SECONDS = 0


def run_workers_once(owner: str = "test-worker") -> int:
    """One pass of every sweep, as beat would trigger them; returns how much was done."""
    done = execution.reap_expired_leases()
    done += execution.dispatch_ready_nodes(owner=owner)
    done += execution.observe_submitted_nodes(owner=owner)
    done += execution.recover_unknown_nodes(owner=owner)
    return done


def settle(request: MovementRequest, *, until=None, timeout: float = 10.0) -> MovementRequest:
    """Run the sweeps until the request reaches a state in ``until`` (default: terminal or
    waiting for a human), or fail after ``timeout`` seconds."""
    targets = set(
        until or (*TERMINAL_REQUEST_STATES, "MANUAL_INTERVENTION", "WAITING_MANUAL_ACTION")
    )
    deadline = time.monotonic() + timeout
    while True:
        request.refresh_from_db()
        if request.request_state in targets:
            return request
        if time.monotonic() > deadline:
            states = dict(request.nodes.values_list("node_key", "node_state"))
            raise AssertionError(f"request stuck in {request.request_state}: {states}")
        if not run_workers_once():
            time.sleep(0.01)


def node_path(request: MovementRequest, node_key: str) -> list[str]:
    """The states a node went through, from its audit events."""
    events = MovementEvent.objects.filter(
        request=request, node_key=node_key, kind=MovementEvent.Kind.TRANSITION
    ).order_by("created_at", "id")
    path = []
    for event in events:
        if not path:
            path.append(event.old_state)
        path.append(event.new_state)
    return path


def assert_history_replays(request: MovementRequest) -> None:
    """Every node's transition events chain from BLOCKED to its current state along legal
    edges, and so do the request's (from RECEIVED)."""
    from movements.states import can_transition_node_state, can_transition_request_state

    for node in request.nodes.all():
        state = "BLOCKED"
        for event in node.events.filter(kind=MovementEvent.Kind.TRANSITION).order_by("id"):
            assert event.old_state == state, (node.node_key, event.old_state, state)
            assert can_transition_node_state(event.old_state, event.new_state)
            state = event.new_state
        assert state == node.node_state, (node.node_key, state, node.node_state)
    state = "RECEIVED"
    for event in request.events.filter(
        node__isnull=True, kind=MovementEvent.Kind.TRANSITION
    ).order_by("id"):
        assert event.old_state == state
        assert can_transition_request_state(event.old_state, event.new_state)
        state = event.new_state
    assert state == request.request_state


def ledger(operation: str, **filters) -> list:
    from sandbox.models import LedgerEntry

    return list(LedgerEntry.objects.filter(operation=operation, **filters))


# --- real worker processes --------------------------------------------------------------------


REPO = Path(__file__).resolve().parents[2]
# Fast ticks and chains so a lane settles in seconds (the beat schedule reads these).
CLUSTER_ENV = {
    "QTG_TICK_SECONDS": "0.3",
    "QTG_OBSERVE_POLL_SECONDS": "0.2",
    "QTG_RETRY_BASE_SECONDS": "0.2",
    "QTG_RETRY_MAX_SECONDS": "2",
    "QTG_LEASE_SECONDS": "5",
    "QTG_EXPIRE_APPROVALS_SECONDS": "0.5",
    "QTG_SANDBOX_ENABLED": "1",
    "QTG_SANDBOX_TIME_SCALE": "0.01",
    # A withdrawal request is carried out up to 10 s after its fenced deadline (the sandbox's
    # submit timeout is 10 s): recovery waits that long before "not found" proves anything.
    "QTG_SANDBOX_REQUEST_VALIDITY_SECONDS": "10",
    # QTG_TEST_CLUSTER_LOG_LEVEL=INFO puts every transition in the workers' logs (tmp_path).
    "QTG_LOG_LEVEL": os.environ.get("QTG_TEST_CLUSTER_LOG_LEVEL", "WARNING"),
}


def _database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    auth = db.get("USER") or ""
    if db.get("PASSWORD"):
        auth += f":{db['PASSWORD']}"
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{auth}@{host}:{port}/{db['NAME']}"


class Cluster:
    """Celery beat and N solo-pool workers (one process each) on a fresh queue."""

    def __init__(self, tmp: Path, workers: int) -> None:
        self.tmp = tmp
        self.queue = f"qtg-test-{uuid.uuid4().hex[:10]}"
        self.env = {
            **os.environ,
            **CLUSTER_ENV,
            "DATABASE_URL": _database_url(),
            "QTG_CELERY_QUEUE": self.queue,
            "QTG_VAR_DIR": str(tmp / "var"),
            "PYTHONPATH": str(REPO),
        }
        if not os.environ.get("CELERY_BROKER_URL"):
            self.env["CELERY_BROKER_URL"] = "filesystem://"
        self.workers: list[subprocess.Popen] = []
        self.beat: subprocess.Popen | None = None
        self.count = workers

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = (self.tmp / f"{name}.log").open("w")
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "qtg", *args],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def start_worker(self, queues: list[str] | None = None) -> subprocess.Popen:
        """A worker consuming ``queues`` (default: every queue of the deployment), ready."""
        [worker] = self.start_workers(1, queues)
        return worker

    def _spawn_worker(self, queues: list[str] | None = None) -> subprocess.Popen:
        n = len(self.workers) + 1
        worker = self._spawn(
            f"worker{n}",
            "worker",
            "--pool",
            "solo",
            # Every queue of the deployment (qtg/queues.py): each worker here serves them all.
            "-Q",
            ",".join(queues or all_queues(self.queue)),
            "-n",
            f"w{n}-{self.queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "INFO",
        )
        self.workers.append(worker)
        return worker

    def _wait_ready(self, log: Path, worker: subprocess.Popen, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if worker.poll() is not None and worker.returncode == -signal.SIGKILL:
                # Killed by a crash point (QTG_EVM_CRASH_AT, ...) inside its first task, which
                # can come before its "ready." line: that is the test's to judge.
                return
            if "ready." in log.read_text():
                return
            time.sleep(0.2)
        raise RuntimeError(f"worker did not start:\n{log.read_text()[-3000:]}")

    def start_workers(self, count: int, queues: list[str] | None = None) -> list[subprocess.Popen]:
        """``count`` workers started side by side, then waited for (each takes seconds to
        import and connect)."""
        first = len(self.workers) + 1
        spawned = [self._spawn_worker(queues) for _ in range(count)]
        for n, worker in enumerate(spawned, start=first):
            self._wait_ready(self.tmp / f"worker{n}.log", worker)
        return spawned

    def start(self) -> "Cluster":
        self.start_workers(self.count)
        self.beat = self._spawn("beat", "beat", "-s", str(self.tmp / "beat-schedule"), "-l", "INFO")
        return self

    def pids(self) -> set[int]:
        return {w.pid for w in self.workers if w.poll() is None}

    def kill(self, pid: int) -> None:
        os.kill(pid, signal.SIGKILL)
        for worker in self.workers:
            if worker.pid == pid:
                worker.wait(timeout=10)

    def stop(self) -> None:
        procs = [p for p in [self.beat, *self.workers] if p is not None and p.poll() is None]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    """Beat and three worker processes against the test database and the broker in
    CELERY_BROKER_URL (the embedded filesystem broker when unset)."""
    from django.conf import settings as django_settings

    if not django_settings.DB_IS_POSTGRES:
        pytest.skip("real worker processes need PostgreSQL")
    running = Cluster(tmp_path_factory.mktemp("cluster"), workers=3).start()
    yield running
    running.stop()


def wait_for(predicate, *, timeout: float = 60, interval: float = 0.2, message=""):
    """``predicate()``'s first truthy value within ``timeout`` seconds; else an AssertionError
    with ``message`` (a callable is asked then, for what things look like at the end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError((message() if callable(message) else message) or "timed out waiting")

"""No single scheduler: two beat processes (as on two machines) and a worker. One beat leads
(holds the ``beat`` lease) and sends the sweeps; SIGKILL it and the other takes the lease
within one lease period and the sweeps go on."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from qtg.queues import all_queues
from tests.ops.test_embedded_restart import embedded_env, last_sweep

# Its own processes, database and broker: the same on every run (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.self_contained]

ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 3.0


def lease(tmp: Path) -> tuple[str, datetime] | None:
    try:
        with sqlite3.connect(tmp / "qtg.sqlite3", timeout=5) as db:
            row = db.execute(
                "select holder, expires_at from ops_leaderlease where name = 'beat'"
            ).fetchone()
    except sqlite3.OperationalError:
        return None
    return (row[0], datetime.fromisoformat(row[1]).replace(tzinfo=UTC)) if row else None


def wait(predicate, timeout: float, what: str, logs: list[Path]):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    tails = "\n".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for log in logs)
    raise AssertionError(f"{what} not within {timeout}s\n{tails}")


@pytest.fixture
def deployment(tmp_path):
    env = embedded_env(tmp_path, 0)
    env.update(
        QTG_CELERY_QUEUE=f"failover-{uuid.uuid4().hex[:8]}",
        QTG_SCHEDULER_LEASE_SECONDS=str(LEASE_SECONDS),
        QTG_LOG_LEVEL="INFO",
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=300
    )
    procs: dict[str, subprocess.Popen] = {}
    logs: list[Path] = []

    def spawn(name: str, *args: str) -> None:
        log = tmp_path / f"{name}.log"
        logs.append(log)
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "qtg", *args],
            cwd=ROOT,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )

    queue = env["QTG_CELERY_QUEUE"]
    spawn(
        "worker", "worker", "--pool", "solo", "-Q", ",".join(all_queues(queue)), "-n", f"{queue}@%h"
    )
    spawn("beat-a", "beat", "-s", str(tmp_path / "schedule-a"))
    spawn("beat-b", "beat", "-s", str(tmp_path / "schedule-b"))
    try:
        yield {"tmp": tmp_path, "procs": procs, "logs": logs}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_killing_the_leading_beat_hands_the_sweeps_to_the_other(deployment):
    tmp, procs, logs = deployment["tmp"], deployment["procs"], deployment["logs"]
    beats = {procs["beat-a"].pid: "beat-a", procs["beat-b"].pid: "beat-b"}

    holder, _ = wait(lambda: lease(tmp), 120, "a beat taking the lease", logs)
    wait(lambda: last_sweep(tmp), 120, "a first sweep", logs)
    leader_pid = int(holder.rsplit(":", 1)[1])
    assert leader_pid in beats
    standby = next(name for pid, name in beats.items() if pid != leader_pid)

    os.kill(leader_pid, signal.SIGKILL)
    killed_at = datetime.now(UTC)
    started = time.monotonic()

    new_holder, _ = wait(
        lambda: (row := lease(tmp)) and row[0] != holder and row, 60, "a new leader", logs
    )
    took_over = time.monotonic() - started
    assert int(new_holder.rsplit(":", 1)[1]) == procs[standby].pid
    # within one lease (plus the stand-by's check interval and a loaded machine's slack)
    assert took_over < LEASE_SECONDS * 3, took_over
    # and the sweeps go on: sent by the new leader, run by the worker
    wait(lambda: (last_sweep(tmp) or killed_at) > killed_at, 60, "a sweep after the kill", logs)
    assert procs[standby].poll() is None

"""`make run` (``manage.py run_embedded``) on the embedded default: SIGKILL any of its processes
(web, each queue's worker, beat) and the supervisor starts it again within seconds (logged,
with its backoff) while the others keep running; the product serves again: the web answers,
periodic sweeps finish again."""

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from movements.management.commands.run_embedded import procfile_processes
from tests.ops.test_production_smoke import free_port, stop

# Its own processes, database and broker: the same on every run (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.self_contained]

ROOT = Path(__file__).resolve().parents[2]
# How long the product may take to serve again after a process is killed: the restart
# backoff (1 s) plus the process's own start-up on a loaded 2-core machine.
BACK_WITHIN_SECONDS = 45
RUN_EMBEDDED = [sys.executable, "manage.py", "run_embedded", "--no-seed"]


def embedded_env(tmp: Path, port: int) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR"}
        and not k.startswith("QTG_")
    }
    env.update(
        QTG_PROFILE="embedded",
        QTG_VAR_DIR=str(tmp),
        QTG_TICK_SECONDS="0.5",
        QTG_HEARTBEAT_WRITE_SECONDS="0",
        QTG_LOG_LEVEL="INFO",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    return env


def pids(log: Path) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for name, pid in re.findall(r"\| ([\w-]+) started \(pid=(\d+)\)", log.read_text()):
        found.setdefault(name, []).append(int(pid))
    return found


def last_sweep(tmp: Path) -> datetime | None:
    try:
        with sqlite3.connect(tmp / "qtg.sqlite3", timeout=5) as db:
            (at,) = db.execute("select max(last_run_at) from ops_sweepheartbeat").fetchone()
    except sqlite3.OperationalError:
        return None
    return datetime.fromisoformat(at).replace(tzinfo=UTC) if at else None


def wait(predicate, timeout: float, what: str, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} not within {timeout}s:\n{log.read_text()[-4000:]}")


def web_answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/admin/login/", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def product(tmp_path):
    port = free_port()
    log = tmp_path / "run.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [*RUN_EMBEDDED, "--addr", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=embedded_env(tmp_path, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield {"process": process, "log": log, "base": f"http://127.0.0.1:{port}", "tmp": tmp_path}
    finally:
        stop(process)


def test_each_killed_process_is_restarted_and_the_product_serves_again(product):
    log, base, tmp = product["log"], product["base"], product["tmp"]
    wait(lambda: web_answers(base), 120, "the web answering", log)
    wait(lambda: last_sweep(tmp), 120, "a first periodic sweep", log)

    # every process `make run` supervises: web, the three workers (one per queue), beat
    names = list(procfile_processes())
    assert {"web", "worker", "worker-venues", "worker-webhooks", "beat"} <= set(names)
    for name in names:
        before = pids(log)
        victim = before[name][-1]
        killed_at = datetime.now(UTC)
        started = time.monotonic()
        os.kill(victim, signal.SIGKILL)

        # the supervisor noticed, said so, and started a new one; the others kept their pids
        count = len(before[name]) + 1
        wait(lambda n=name, c=count: len(pids(log).get(n, [])) == c, 15, "restart", log)
        assert re.search(rf"\| {name} exited \(rc=-9\).*restarting in 1s", log.read_text())
        after = pids(log)
        assert {k: v[-1] for k, v in after.items() if k != name} == {
            k: v[-1] for k, v in before.items() if k != name
        }
        # and the product serves again: the web answers and a sweep finishes after the kill
        wait(lambda: web_answers(base), BACK_WITHIN_SECONDS, f"web after killing {name}", log)
        wait(
            lambda k=killed_at: (last_sweep(tmp) or k) > k,
            BACK_WITHIN_SECONDS,
            f"a sweep after killing {name}",
            log,
        )
        assert time.monotonic() - started < BACK_WITHIN_SECONDS
        assert product["process"].poll() is None

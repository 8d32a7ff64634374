"""How long /health/live, /health/ready and /metrics take to answer with the database and the
broker down (not a test): a real gunicorn started as production starts it (the Procfile's
settings file, production profile), its database and broker either refusing connections
(stopped) or never answering (a partition, a host gone). Prints min / median / max of the
warm answers with the target beside them (a load balancer's probe: /health/ready's 503 within
1 s; /health/live at once). tests/ops/test_health_down.py asserts the same bounds.

    python bench/health_down.py --repeat 10
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ops.test_production_smoke import TOKEN, free_port, production_env, stop  # noqa: E402

READY_TARGET_SECONDS = 1.0


def silent_port() -> tuple[socket.socket, int]:
    """A TCP port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def accept() -> None:
        held = []
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


def timed(url: str, **kwargs) -> tuple[int, float]:
    started = time.monotonic()
    response = httpx.get(url, timeout=90, **kwargs)
    return response.status_code, time.monotonic() - started


def spread(values: list[float]) -> str:
    middle = statistics.median(values)
    return " / ".join(f"{v * 1000:.0f}" for v in (min(values), middle, max(values)))


def measure(mode: str, repeat: int) -> None:
    server = None
    if mode == "hanging":
        server, port = silent_port()
    else:
        port = 1  # nothing listens there: connections are refused
    tmp = Path(tempfile.mkdtemp(prefix="qtg-health-bench-"))
    web = free_port()
    env = production_env(
        tmp,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/qtg_down",
        CELERY_BROKER_URL=f"redis://127.0.0.1:{port}/0",
    )
    process = subprocess.Popen(
        [
            *("gunicorn", "qtg.wsgi:application", "--config", "python:qtg.gunicorn_conf"),
            *("--bind", f"127.0.0.1:{web}", "--workers", "1", "--timeout", "60"),
        ],
        cwd=ROOT,
        env=env,
        stdout=(tmp / "web.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{web}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                httpx.get(f"{base}/health/live", timeout=5)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise SystemExit((tmp / "web.log").read_text()[-3000:]) from None
                time.sleep(0.3)
        first_status, first = timed(f"{base}/health/ready")
        live, ready, scrape, statuses = [], [], [], set()
        for _ in range(repeat):
            status, seconds = timed(f"{base}/health/live")
            statuses.add(("live", status))
            live.append(seconds)
            status, seconds = timed(f"{base}/health/ready")
            statuses.add(("ready", status))
            ready.append(seconds)
        status, seconds = timed(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        statuses.add(("metrics", status))
        scrape.append(seconds)
    finally:
        stop(process)
        if server is not None:
            server.close()
    ok = statistics.median(ready) < READY_TARGET_SECONDS
    print(f"database and broker {mode}: answers {sorted(statuses)}")
    print(f"  /health/live     {spread(live)} ms")
    print(
        f"  /health/ready    {spread(ready)} ms (first {first * 1000:.0f} ms, {first_status}); "
        f"target < {READY_TARGET_SECONDS * 1000:.0f} ms: {'holds' if ok else 'MISSES'}"
    )
    print(f"  /metrics         {scrape[0] * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"load average: {load} ({os.cpu_count()} CPUs); min / median / max of warm answers")
    for mode in ("refusing", "hanging"):
        measure(mode, args.repeat)


if __name__ == "__main__":
    main()
